"""Several daemons sharing keys and work through Valkey (or Redis >= 7.2); needs the ``cluster`` extra."""
