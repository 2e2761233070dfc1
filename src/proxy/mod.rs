//! Forwarding to upstreams.
