#!/bin/sh
# Runs once, on the first start of the compose Postgres (docker-entrypoint-initdb.d): one database per service.
# POSTGRES_DB (whale, the WHALE archive) is created by the image itself.
set -eu
for db in prefect mlflow; do
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -c "CREATE DATABASE $db OWNER \"$POSTGRES_USER\""
done
