//! Stream dialects: what counts as a token event in each API's stream.
pub mod openai;
