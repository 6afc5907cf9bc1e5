"""The consumer core: stream state, the ``Reassembler``, loss reports and the
log follower's marker hold. The harness pieces built on it (events, history
repair) are in ``_harness``."""
