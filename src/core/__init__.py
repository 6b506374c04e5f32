"""The ground floor every stage stands on: where things live and ConfigError (paths), the config's
types (schema), the command-line style and exit codes (cli), the devices a run asks for (devices),
file locks between processes (locks) and atomic file writes (atomic_io). It imports no other stage."""
