"""Two database roles: the owner runs the migrations and owns every table; the app role, which
web, worker and beat connect as, is granted only what the app needs (``grant_app_role``).

The history tables are append-only: a trigger refuses UPDATE and DELETE of their rows
(``presets/migrations/0003_history_append_only.py``), but a table's owner may still TRUNCATE
it, disable the trigger or drop the table. The app role owns nothing and may only SELECT and
INSERT history, so nobody who takes over a web or worker process can rewrite it.

The grants are recomputed from the models and the database every time, revoking first: run
after each ``migrate``, a new table gets its grants and a table that became history loses
what it no longer may have.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper
from simple_history.models import HistoricalChanges

# The trigger function of presets/migrations/0003_history_append_only.py: a table with a
# trigger calling it is append-only, whether or not simple-history made it.
APPEND_ONLY_FUNCTION = "controlplane_history_is_append_only"
MIGRATIONS_TABLE = "django_migrations"

ORDINARY = ("SELECT", "INSERT", "UPDATE", "DELETE")
APPEND_ONLY = ("SELECT", "INSERT")
READ_ONLY = ("SELECT",)
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")

# Quoted with double quotes in the SQL below, so a name must not contain one; this also keeps
# the error messages' suggested SQL copyable.
ROLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$.-]{0,62}")


class GrantRefused(Exception):
    """Nothing was granted; the message says why and what to run instead (one line)."""


@dataclass
class Grants:
    """What ``grant_app_role`` did: one line per kind of grant, the SQL it ran, warnings."""

    lines: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def history_tables(*, using: str = "default") -> list[str]:
    """The append-only tables: every simple-history table, and every table with the
    append-only trigger."""
    connection = connections[using]
    tables = {
        model._meta.db_table
        for model in connection.introspection.get_migratable_models()
        if model._meta.managed and issubclass(model, HistoricalChanges)
    }
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
                "JOIN pg_class c ON c.oid = t.tgrelid "
                "WHERE p.proname = %s AND c.relnamespace = current_schema()::regnamespace",
                [APPEND_ONLY_FUNCTION],
            )
            tables.update(name for (name,) in cursor.fetchall())
    return sorted(tables)


def grant_app_role(*, role: str, using: str = "default") -> Grants:
    """Give ``role`` exactly the privileges the app needs on the current schema, revoking
    everything else it was granted there first; one transaction, PostgreSQL only.

    Raises ``GrantRefused``, having changed nothing, when the role is missing, the connected
    role does not own the tables, or the app role would have the owner's powers anyway."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        raise GrantRefused(f"database roles apply only to PostgreSQL, not {connection.vendor}")
    if not ROLE_NAME.fullmatch(role):
        raise GrantRefused(
            f"{role!r} is not a role name this command accepts: letters, digits, _, $, . and -, "
            "starting with a letter or _, at most 63 characters"
        )
    quote = connection.ops.quote_name
    grants = Grants()
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute("SELECT current_user, current_schema(), current_database()")
        user, schema, database = cursor.fetchone()
        _check_role_exists(cursor, role=role)
        history = history_tables(using=using)
        ordinary = sorted(set(connection.introspection.django_table_names()) - set(history) - {MIGRATIONS_TABLE})
        tables = [*ordinary, *history, MIGRATIONS_TABLE]
        _check_tables(cursor, tables=tables, user=user)
        _check_role_owns_nothing(cursor, role=role, user=user, database=database, tables=tables)
        sequences = _sequences(cursor, tables=[*ordinary, *history])
        cursor.execute(
            "SELECT pg_has_role(current_user, nspowner, 'USAGE') FROM pg_namespace WHERE nspname = %s", [schema]
        )
        (owns_schema,) = cursor.fetchone()

        def run(statement: str) -> None:
            grants.statements.append(statement)
            cursor.execute(statement)

        who = quote(role)
        if owns_schema:
            run(f"REVOKE ALL ON SCHEMA {quote(schema)} FROM {who}")
        run(f"REVOKE ALL ON ALL TABLES IN SCHEMA {quote(schema)} FROM {who}")
        run(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {quote(schema)} FROM {who}")
        grants.lines.append(f"revoked: everything {role} had on schema {schema}, its tables and sequences")
        if owns_schema:
            run(f"GRANT USAGE ON SCHEMA {quote(schema)} TO {who}")
        if ordinary:
            run(f"GRANT {', '.join(ORDINARY)} ON TABLE {_names(quote, ordinary)} TO {who}")
        grants.lines.append(f"{len(ordinary)} tables: {', '.join(ORDINARY)}")
        if history:
            run(f"GRANT {', '.join(APPEND_ONLY)} ON TABLE {_names(quote, history)} TO {who}")
        grants.lines.append(f"{len(history)} append-only history tables ({', '.join(history)}): SELECT, INSERT")
        if sequences:
            run(f"GRANT USAGE, SELECT ON SEQUENCE {_names(quote, sequences)} TO {who}")
        grants.lines.append(f"{len(sequences)} sequences of those tables: USAGE, SELECT")
        run(f"GRANT SELECT ON TABLE {quote(MIGRATIONS_TABLE)} TO {who}")
        grants.lines.append(f"{MIGRATIONS_TABLE}: SELECT")
        may_create = _check_outcome(cursor, role=role, schema=schema, ordinary=ordinary, history=history)
        create = "and CREATE through PUBLIC: see the warning" if may_create else "no CREATE"
        grants.lines.insert(1, f"schema {schema}: USAGE ({create})")
        if may_create:
            grants.warnings.append(
                f'warning: "{role}" may still CREATE in schema {schema} through PUBLIC (PostgreSQL before 15); '
                f"as the schema's owner: REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC;"
            )
    return grants


def _names(quote: Callable[[str], str], names: Iterable[str]) -> str:
    return ", ".join(quote(name) for name in names)


def _check_role_exists(cursor: CursorWrapper, *, role: str) -> None:
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    if cursor.fetchone() is None:
        raise GrantRefused(
            f'role "{role}" does not exist in this cluster; create it first (as a superuser or a role with '
            f"CREATEROLE), then run this again: CREATE ROLE \"{role}\" LOGIN PASSWORD '...';"
        )


def _check_tables(cursor: CursorWrapper, *, tables: list[str], user: str) -> None:
    """Every table exists and the connected role owns it (or is a superuser)."""
    cursor.execute(
        "SELECT c.relname, pg_get_userbyid(c.relowner), pg_has_role(current_user, c.relowner, 'USAGE') "
        "FROM pg_class c "
        "WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%s) AND c.relkind IN ('r', 'p')",
        [tables],
    )
    found = {name: (owner, ours) for name, owner, ours in cursor.fetchall()}
    missing = [name for name in tables if name not in found]
    if missing:
        raise GrantRefused(
            f"{len(missing)} tables do not exist yet (e.g. {missing[0]}): run `manage.py migrate` first, "
            "then this command"
        )
    foreign = sorted((name, owner) for name, (owner, ours) in found.items() if not ours)
    if foreign:
        name, owner = foreign[0]
        raise GrantRefused(
            f'connected as "{user}", which does not own the tables ({name} is owned by "{owner}"): run this '
            "with the owner's DATABASE_URL, as the role that ran `manage.py migrate`"
        )


def _check_role_owns_nothing(cursor: CursorWrapper, *, role: str, user: str, database: str, tables: list[str]) -> None:
    """The role is not the owner, a superuser, or a member of a role owning the database or
    a table: any of those could do what the owner can, grants or not."""
    if role == user:
        raise GrantRefused(
            f'"{role}" is the role running this command, which owns the tables; the app must connect as a '
            "role of its own: run this as the owner with the app's role as ROLE"
        )
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role])
    if cursor.fetchone()[0]:
        raise GrantRefused(
            f'"{role}" is a superuser, which bypasses every privilege: ALTER ROLE "{role}" NOSUPERUSER; '
            "then run this again"
        )
    cursor.execute(
        "SELECT DISTINCT pg_get_userbyid(owner) FROM ("
        "  SELECT datdba AS owner FROM pg_database WHERE datname = %s"
        "  UNION SELECT relowner FROM pg_class"
        "  WHERE relnamespace = current_schema()::regnamespace AND relname = ANY(%s)"
        ") owners WHERE pg_has_role(%s, owner, 'MEMBER') ORDER BY 1",
        [database, tables, role],
    )
    owners = [name for (name,) in cursor.fetchall()]
    if owners:
        raise GrantRefused(
            f'"{role}" is or belongs to "{owners[0]}", which owns the database or its tables, and so could act '
            f'as the owner: the app role must own nothing (REVOKE "{owners[0]}" FROM "{role}";)'
        )


def _sequences(cursor: CursorWrapper, *, tables: list[str]) -> list[str]:
    """The sequences that number ``tables``' rows (serial and identity columns)."""
    cursor.execute(
        "SELECT DISTINCT s.relname FROM pg_depend d "
        "JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S' "
        "JOIN pg_class t ON t.oid = d.refobjid "
        "WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass "
        "AND d.deptype IN ('a', 'i') AND t.relnamespace = current_schema()::regnamespace AND t.relname = ANY(%s) "
        "ORDER BY s.relname",
        [tables],
    )
    return [name for (name,) in cursor.fetchall()]


def _check_outcome(cursor: CursorWrapper, *, role: str, schema: str, ordinary: list[str], history: list[str]) -> bool:
    """Ask PostgreSQL what ``role`` may do now, through every grant (PUBLIC's and other
    roles' included): more than intended on a table refuses the whole grant. Returns whether
    the role may still CREATE in the schema, through PUBLIC before PostgreSQL 15."""
    intended = {
        **{name: set(ORDINARY) for name in ordinary},
        **{name: set(APPEND_ONLY) for name in history},
        MIGRATIONS_TABLE: set(READ_ONLY),
    }
    cursor.execute(
        "SELECT c.relname, p.privilege FROM pg_class c CROSS JOIN unnest(%s::text[]) AS p(privilege) "
        "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') "
        "AND has_table_privilege(%s, c.oid, p.privilege)",
        [list(TABLE_PRIVILEGES), role],
    )
    extra = sorted(
        f"{privilege} on {name}" for name, privilege in cursor.fetchall() if privilege not in intended.get(name, set())
    )
    if extra:
        raise GrantRefused(
            f'"{role}" would still have {", ".join(extra[:3])}{" and more" if len(extra) > 3 else ""} through '
            "PUBLIC or a role it belongs to: revoke that grant (e.g. REVOKE ALL ON ALL TABLES IN SCHEMA "
            f"{schema} FROM PUBLIC;) and run this again; nothing was granted"
        )
    cursor.execute(
        "SELECT has_schema_privilege(%s, %s, 'USAGE'), has_schema_privilege(%s, %s, 'CREATE')",
        [role, schema, role, schema],
    )
    usage, create = cursor.fetchone()
    if not usage:
        raise GrantRefused(
            f'"{role}" has no USAGE on schema {schema}, whose owner is not the connected role: as its owner, '
            f'GRANT USAGE ON SCHEMA {schema} TO "{role}"; then run this again'
        )
    return bool(create)
