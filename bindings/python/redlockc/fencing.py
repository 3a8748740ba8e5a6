"""Fenced writes in PostgreSQL: the resource refuses a stale holder's write.

A lock holder that pauses past its lease (GC, a stopped VM) may still write
after the next holder did. Fencing tokens stop that, if the database checks
them: every write carries the writer's ``lock.fencing_token``, and a write
whose token is smaller than one already seen for the resource is refused.
docs/FENCING.md explains the recipes; this module is the second of them, a
table of the last token per resource, for any statement::

    import psycopg2, redlockc
    from redlockc import fencing

    client = redlockc.Client(nodes, fencing=True)  # holds take fencing tokens
    with client.lock("orders") as lock:
        token = lock.fencing_token
        with psycopg2.connect(dsn) as conn:       # one transaction
            fencing.ensure_table(conn)
            if not fencing.pg_fenced_update(conn, "orders", token,
                                            "UPDATE orders SET state = %s WHERE id = %s",
                                            ("paid", 42)):
                raise RuntimeError("a newer lock holder wrote already")

Works with psycopg2 (Debian's python3-psycopg2), or any DB-API connection
with the ``%s`` parameter style. Nothing here commits: the token and the
statement commit or roll back together with the caller's transaction.
"""

__all__ = ["TABLE", "ensure_table", "pg_fenced_update"]

#: The table of last tokens, one row per resource name.
TABLE = "redlockc_fences"

# bigint holds every token a lock can reach (the counter would need 2^63 holds).
_MAX_TOKEN = 2**63 - 1


def ensure_table(conn, table=TABLE):
    """Creates the table of last tokens if it is missing (in the caller's transaction)."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {_ident(table)} ("
                    "resource text PRIMARY KEY, token bigint NOT NULL)")


def pg_fenced_update(conn, resource, token, sql, params=(), table=TABLE):
    """Runs ``sql`` with ``params`` only if ``token`` is at least the last token of ``resource``.

    First records ``token`` as the resource's last token, in one statement
    that only succeeds if no larger token is recorded (INSERT ... ON CONFLICT
    DO UPDATE ... WHERE token <= new token). That statement locks the
    resource's row until the caller's transaction ends, so writers of one
    resource are serialized and each sees the token the previous one
    committed. Then it runs ``sql`` in the same transaction.

    Returns True if ``sql`` ran, False if a larger token was recorded (then
    nothing was written; the caller usually rolls back). ``token``: an int,
    1 .. 2**63-1 (``lock.fencing_token``).
    """
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int, not {type(token).__name__}")
    if not 1 <= token <= _MAX_TOKEN:
        raise ValueError(f"token must be 1 .. 2**63-1, got {token}")
    if not isinstance(resource, str) or not resource:
        raise ValueError("resource must be a non-empty str")
    t = _ident(table)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {t} AS f (resource, token) VALUES (%s, %s) "
                    "ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token "
                    "WHERE f.token <= EXCLUDED.token RETURNING f.token",
                    (resource, token))
        if cur.fetchone() is None:
            return False
        cur.execute(sql, params)
        return True


def _ident(name):
    """A quoted SQL identifier, optionally schema-qualified ("schema.table")."""
    if not isinstance(name, str) or not name:
        raise ValueError("table must be a non-empty str")
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))
