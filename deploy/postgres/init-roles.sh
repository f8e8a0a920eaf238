#!/bin/sh
# The two database roles (docs/deploy.md, "Database roles"). The postgres image runs this once,
# as its superuser, when it initialises an empty data directory (/docker-entrypoint-initdb.d),
# after creating POSTGRES_DB:
#   DB_OWNER_USER  owns the database and its schema: the release step connects as it to
#                  migrate, then grants the app role its rights (manage.py grant_app_role).
#   DB_APP_USER    what web, worker and beat connect as: it owns nothing, so it can neither
#                  TRUNCATE nor alter the tables, nor rewrite the append-only history.
# Safe to run again (a role that exists is left as it is). For a data directory initialised
# before this script existed, run it by hand once (docs/deploy.md, "Database roles").
# The image sources a script that is not executable: so no `set` or `exit` here.
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:?}" \
  --set=db="${POSTGRES_DB:?}" \
  --set=owner="${DB_OWNER_USER:?set DB_OWNER_USER}" --set=owner_password="${DB_OWNER_PASSWORD:?set DB_OWNER_PASSWORD}" \
  --set=app="${DB_APP_USER:?set DB_APP_USER}" --set=app_password="${DB_APP_PASSWORD:?set DB_APP_PASSWORD}" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'owner', :'owner_password')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner') \gexec
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'app', :'app_password')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'app') \gexec
ALTER DATABASE :"db" OWNER TO :"owner";
ALTER SCHEMA public OWNER TO :"owner";
-- Only the owner creates tables (PostgreSQL 15 and later revoke this already).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SQL
