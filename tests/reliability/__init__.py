"""Reliability and security: crashes, database faults, fuzzing, authorisation, secrets, abuse."""
