"""Secrets at rest: sealed answers, the keyring, rotation, retention and echo masking.

A secret answer's plaintext lives only inside an AES-GCM box in ``message_secrets``; the
message row itself holds a masked copy. Only the model-facing projections open boxes
(``SecretService.model_rows``). See docs/security.md, "Secrets".
"""
