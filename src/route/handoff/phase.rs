//! The handoff phase's value: the router it asks. Its methods are spread over this folder's
//! files, each depending only on those after it: the phase itself and the decode request
//! (`serve.rs`), the prefill pool's side (`remote.rs`), the predictions (`predicted.rs`); this
//! file, which they all name, calls none of them.
use std::sync::Arc;

use crate::route::Router;

/// The handoff phase: runs the prefill of a handoff pool's request where the policy says, then
/// forwards it.
#[derive(Debug, Clone)]
pub struct Handoff {
    pub(super) router: Arc<Router>,
}

impl Handoff {
    pub fn new(router: Arc<Router>) -> Self {
        Self { router }
    }
}
