//! Byte-level, incremental Server-Sent Events scanner (WHATWG rules).
