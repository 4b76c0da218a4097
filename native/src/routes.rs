//! Where each recently published subject goes, for the codec's fast path.
//!
//! The Python sublist stays the source of truth: `Client` fills an entry from its
//! match (`learn_route` in ingest/server/client.py) and the sublist clears the table
//! on every SUB and UNSUB, as it clears its own caches. An entry either lists
//! plain client subscriptions to frame into, or says the subject needs Python
//! (queue groups, internal subscribers, per-message checks).

use crate::outlet::Outlet;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{intern, PyTraverseError, PyVisit};
use std::collections::HashMap;

/// As many subjects as the sublist's own exact cache keeps.
const LIMIT: usize = 4096;

pub struct Target {
    pub outlet: Py<Outlet>,
    pub sid: Vec<u8>,
    sub: Py<PyAny>,
    /// Deliveries not yet added to the subscription's `_delivered`.
    pub count: u64,
}

pub enum Route {
    /// Python routes it (the codec returns the Pub op).
    Slow,
    Fast(Vec<Target>),
}

/// What `learn` is given per target: (outlet, sid, subscription).
type Learnt<'py> = (Py<Outlet>, Bound<'py, PyBytes>, Py<PyAny>);

#[pyclass(module = "jetlake_native")]
pub struct Routes {
    map: HashMap<Vec<u8>, Route>,
    /// Some target has counts to settle: monitoring asks for every subscription's count,
    /// and only the first ask after deliveries walks the table.
    pub unsettled: bool,
}

impl Routes {
    pub fn get_mut(&mut self, subject: &[u8]) -> Option<&mut Route> {
        self.map.get_mut(subject)
    }
}

#[pymethods]
impl Routes {
    #[new]
    fn new() -> Self {
        Self {
            map: HashMap::new(),
            unsettled: false,
        }
    }

    /// Record a subject's targets as (outlet, sid, subscription) triples; None: Python routes it.
    fn learn(
        &mut self,
        py: Python<'_>,
        subject: &[u8],
        targets: Option<Vec<Learnt<'_>>>,
    ) -> PyResult<()> {
        if self.map.len() >= LIMIT {
            self.clear(py)?;
        }
        let route = match targets {
            None => Route::Slow,
            Some(list) => Route::Fast(
                list.into_iter()
                    .map(|(outlet, sid, sub)| Target {
                        outlet,
                        sid: sid.as_bytes().to_vec(),
                        sub,
                        count: 0,
                    })
                    .collect(),
            ),
        };
        self.map.insert(subject.to_vec(), route);
        Ok(())
    }

    /// Add the fast path's deliveries to each subscription's count (monitoring, UNSUB max).
    fn settle(&mut self, py: Python<'_>) -> PyResult<()> {
        if !self.unsettled {
            return Ok(());
        }
        self.unsettled = false;
        for route in self.map.values_mut() {
            let Route::Fast(targets) = route else {
                continue;
            };
            for t in targets.iter_mut().filter(|t| t.count > 0) {
                let sub = t.sub.bind(py);
                let name = intern!(py, "_delivered");
                let now: u64 = sub.getattr(name)?.extract()?;
                sub.setattr(name, now + t.count)?;
                t.count = 0;
            }
        }
        Ok(())
    }

    /// Forget every subject (interest changed), settling counts first.
    fn clear(&mut self, py: Python<'_>) -> PyResult<()> {
        self.settle(py)?;
        self.map.clear();
        Ok(())
    }

    fn __contains__(&self, subject: &[u8]) -> bool {
        self.map.contains_key(subject)
    }

    fn __len__(&self) -> usize {
        self.map.len()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for route in self.map.values() {
            if let Route::Fast(targets) = route {
                for t in targets {
                    visit.call(&t.outlet)?;
                    visit.call(&t.sub)?;
                }
            }
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.map.clear();
    }
}
