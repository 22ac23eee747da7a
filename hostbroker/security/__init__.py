"""Access control: who a connection is, and what it may do.

Pure (no sockets, no shared memory): :mod:`.principals` (the identity of a
connection: Unix peer credentials, a TLS client certificate, or anonymous),
:mod:`.acl` (Kafka's ACL model: bindings, filters and their JSON form) and
:mod:`.authorizer` (the decision over one ACL set). The processes that hold
connections take an identity for each and ask an Authorizer built over the
ACL set of the current generation.
"""
