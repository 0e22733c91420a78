"""The ConnectionNode: this process's sockets by user, fan-out to them and to other nodes, presence, and frames encoded once (design §1: ConnectionShard)."""
