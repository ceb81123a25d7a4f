#!/bin/sh
# Runs mariadbd on a data folder inside the mounted volume: a fresh filesystem's lost+found at the
# volume's top would look like a database to MariaDB. A new folder is initialised once; the
# server gets SIGTERM from the kubelet and shuts down cleanly (InnoDB logs "Shutdown completed").
set -eu
volume=${MARIADB_VOLUME:-/var/lib/mysql}
datadir=$volume/data
if [ ! -d "$datadir/mysql" ]; then
	install -d -o mysql -g mysql "$datadir"
	mariadb-install-db --user=mysql --datadir="$datadir" --auth-root-authentication-method=socket \
		--skip-test-db >/dev/null
	echo "entrypoint: initialised $datadir"
fi
chown mysql:mysql "$datadir"
exec mariadbd --user=mysql --datadir="$datadir" --socket=/run/mysqld/mysqld.sock \
	--bind-address=127.0.0.1 --skip-name-resolve \
	--innodb-flush-log-at-trx-commit=1 --sync-binlog=1 --innodb-flush-method=O_DIRECT "$@"
