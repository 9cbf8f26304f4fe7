"""Database plumbing: schema metadata, the connection pool, migrations, the embedded server."""
