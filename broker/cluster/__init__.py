"""The cluster: metadata store and controller (local or etcd), replica manager, replica fetchers."""
