"""Runtime leases: an agent runtime's proof of life, and the background jobs it runs under one.

A runtime takes a lease (``POST /v1/agent/leases``) and heartbeats it; the background jobs it
reports started with the lease's id end as lost (a ``jobLost`` event that queues a turn) when
the lease lapses, so a thread whose runtime died stops saying "working in the background".
"""
