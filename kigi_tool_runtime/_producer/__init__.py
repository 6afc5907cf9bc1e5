"""The producer core (sans-IO): ``stream_chunk``, the bounded tail, the delta
streamer and the author's ``OutputStream``."""
