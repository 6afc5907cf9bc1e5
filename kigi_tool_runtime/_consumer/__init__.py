"""The consumer core: stream state, the ``Reassembler``, loss reports, the log
follower, harness events and history repair."""
