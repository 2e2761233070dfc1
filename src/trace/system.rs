//! The trace subsystem as the server composes it: the phase series and the span exporter, built
//! once from config (the exporter kept by a reload that does not change its settings), and a
//! revision of it per config revision (the sampler at the head, the finish hook).
use std::sync::Arc;
use std::time::Duration;

use super::export::Exporter;
use super::series::PhaseSeries;
use super::{TraceHook, Tracing};
use crate::config::Config;
use crate::context::FinishHook;
use crate::metrics::Metrics;

/// What the trace subsystem keeps for the process's life.
pub struct TraceSystem {
    metrics: Arc<Metrics>,
    /// The TTFT split's and the proxy's overhead series, shared by every revision.
    phases: Arc<PhaseSeries>,
    /// The span exporter of `[tracing]` (`None`: tracing off).
    exporter: Option<Arc<Exporter>>,
}

/// A stack revision's part of the trace subsystem.
pub struct TraceRevision {
    /// The sampler and exporter a request's head starts its trace with (`None`: off).
    pub tracing: Option<Arc<Tracing>>,
    /// Counts each request's phases and queues its spans.
    pub hook: Arc<dyn FinishHook>,
}

/// A reload's exporter, started (or kept) before anything changes.
pub struct Prepared(Option<Arc<Exporter>>);

impl TraceSystem {
    /// The series, and the exporter `config` names (an exporter that cannot be built stops the
    /// start with its key named, rather than serving without spans).
    pub fn build(config: &Config, metrics: &Arc<Metrics>) -> Result<Self, String> {
        let exporter = match config.tracing.export() {
            Some(settings) => Some(Exporter::start(&settings, metrics)?),
            None => None,
        };
        Ok(Self {
            metrics: Arc::clone(metrics),
            phases: Arc::new(PhaseSeries::new(Arc::clone(metrics), config)),
            exporter,
        })
    }

    /// The part of the revision of `config`.
    pub fn revision(&self, config: &Config) -> TraceRevision {
        let tracing = self
            .exporter
            .as_ref()
            .map(|exporter| Arc::new(Tracing::new(&config.tracing, Arc::clone(exporter))));
        TraceRevision {
            hook: Arc::new(TraceHook::new(Arc::clone(&self.phases), tracing.clone())),
            tracing,
        }
    }

    /// A reload's first step: the exporter of `config` (the running one when its settings are
    /// the same, a new one otherwise, none when tracing is off).
    pub fn prepare(&self, config: &Config) -> Result<Prepared, String> {
        let Some(settings) = config.tracing.export() else {
            return Ok(Prepared(None));
        };
        match &self.exporter {
            Some(running) if running.settings() == &settings => {
                Ok(Prepared(Some(Arc::clone(running))))
            }
            _ => Exporter::start(&settings, &self.metrics).map(|started| Prepared(Some(started))),
        }
    }

    /// A reload's second step, once every subsystem prepared.
    pub fn commit(&mut self, prepared: Prepared) {
        self.exporter = prepared.0;
    }

    /// At shutdown, once every request has ended (its spans are queued): sends them, within
    /// `within`.
    pub async fn shutdown(&self, within: Duration) {
        if let Some(exporter) = &self.exporter {
            exporter.flush(within).await;
        }
    }
}
