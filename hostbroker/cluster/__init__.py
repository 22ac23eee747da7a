"""Cluster mode: brokers, producers and consumer groups coordinated through ZooKeeper.

Everything here follows docs/spec/zookeeper.md (paths, values, the range
rebalance); without ``zookeeper.connect`` nothing in this package runs. Parts:

- ``paths``  the ZooKeeper layout and the values stored there (pure)
- ``replica_nodes``  the replication nodes (assignments, partition states, the
  controller's and the admin nodes): paths, encoders, and decoders that read every
  value as hostile (through ``zkread``'s bounds); pure
- ``zk``     ``zookeeper.connect`` strings checked, and kazoo clients made from them
- ``discovery``  ClusterView: live brokers and topic partitions, kept current by watches
- ``rebalance``  the range assignment of partitions to a group's streams (pure)
- ``membership`` a consumer's ZooKeeper side: registration, owner claims, offsets
- ``controller`` (with ``controller_admin``, ``controller_topics``, ``controller_decisions``)
  the controller of replicated topics, run by one broker's registrar
- ``topic_changes``  a replicated topic changed in place: config change nodes and
  added partitions (``topics alter --zookeeper``)

Imports point downward: the broker's workers and the client library use this
package; it uses neither.
"""
