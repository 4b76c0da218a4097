//! The runs the codec hands Python instead of one `Pub` each: a consumer's plain acks
//! (`AckRun`) and a stream's plain publishes (`PubRun`). A read has them one after
//! another, all before its first operation for Python (see `ServerCodec::parse` in
//! lib.rs).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// Consecutive plain acks to one consumer, in the order they were read.
#[pyclass(module = "jetlake_native", frozen)]
pub struct AckRun {
    /// The consumer's `acks(seqs)`.
    #[pyo3(get)]
    sink: Py<PyAny>,
    /// (delivered, stream seq, consumer seq) of each ack, flat.
    #[pyo3(get)]
    seqs: Vec<u64>,
    /// Their bodies' bytes, for the counters a routed PUB moves.
    #[pyo3(get)]
    size: u64,
    /// For a consumer on a peer: the acks as RMSGs, for `sink(frames, msgs, size)`, the
    /// route's `forward_acks`.
    #[pyo3(get)]
    frames: Option<Py<PyBytes>>,
}

/// Consecutive PUBs without headers to one subject whose only receiver is a stream.
#[pyclass(module = "jetlake_native", frozen)]
pub struct PubRun {
    /// The stream's `intake(subject, replies, payloads)`.
    #[pyo3(get)]
    sink: Py<PyAny>,
    #[pyo3(get)]
    subject: Py<PyBytes>,
    /// Each message's reply subject (b"" for none) and payload, in the order read.
    #[pyo3(get)]
    replies: Py<PyList>,
    #[pyo3(get)]
    payloads: Py<PyList>,
    /// Their payloads' bytes, for the counters a routed PUB moves.
    #[pyo3(get)]
    size: u64,
}

/// The run being gathered; it becomes an operation when something else comes.
pub enum Gathering {
    Acks {
        sink: Py<PyAny>,
        seqs: Vec<u64>,
        size: u64,
        frames: Option<Vec<u8>>,
    },
    Pubs {
        sink: Py<PyAny>,
        subject: Vec<u8>,
        replies: Vec<Py<PyAny>>,
        payloads: Vec<Py<PyAny>>,
        size: u64,
    },
}

impl Gathering {
    fn sink(&self) -> &Py<PyAny> {
        match self {
            Gathering::Acks { sink, .. } | Gathering::Pubs { sink, .. } => sink,
        }
    }
}

pub fn is_plain_ack(payload: &[u8]) -> bool {
    matches!(payload, b"" | b"+ACK" | b"+OK")
}

/// Turn the run gathered so far into an operation after those before it.
pub fn close_run(
    py: Python<'_>,
    run: &mut Option<Gathering>,
    ops: &mut Vec<Py<PyAny>>,
) -> PyResult<()> {
    let op = match run.take() {
        None => return Ok(()),
        Some(Gathering::Acks {
            sink,
            seqs,
            size,
            frames,
        }) => {
            let frames = frames.map(|f| PyBytes::new(py, &f).unbind());
            let run = AckRun {
                sink,
                seqs,
                size,
                frames,
            };
            Py::new(py, run)?.into_any()
        }
        Some(Gathering::Pubs {
            sink,
            subject,
            replies,
            payloads,
            size,
        }) => {
            let op = PubRun {
                sink,
                subject: PyBytes::new(py, &subject).unbind(),
                replies: PyList::new(py, replies)?.unbind(),
                payloads: PyList::new(py, payloads)?.unbind(),
                size,
            };
            Py::new(py, op)?.into_any()
        }
    };
    ops.push(op);
    Ok(())
}

/// Add a PUB going to `sink` (and, for PUBs, `subject`) to the read's run: the run it
/// goes with, or a new one after the run gathered so far (which becomes an operation).
/// Acks to a `peer` route gather their frames too.
pub fn join_run(
    py: Python<'_>,
    run: &mut Option<Gathering>,
    ops: &mut Vec<Py<PyAny>>,
    sink: &Py<PyAny>,
    subject: Option<&[u8]>,
    peer: bool,
) -> PyResult<()> {
    if let Some(g) = run.as_ref() {
        let same = g.sink().is(sink)
            && match (g, subject) {
                (Gathering::Acks { .. }, None) => true,
                (Gathering::Pubs { subject: s, .. }, Some(subject)) => s == subject,
                _ => false,
            };
        if same {
            return Ok(());
        }
        close_run(py, run, ops)?;
    }
    *run = Some(match subject {
        None => Gathering::Acks {
            sink: sink.clone_ref(py),
            seqs: Vec::new(),
            size: 0,
            frames: peer.then(Vec::new),
        },
        Some(subject) => Gathering::Pubs {
            sink: sink.clone_ref(py),
            subject: subject.to_vec(),
            replies: Vec::new(),
            payloads: Vec::new(),
            size: 0,
        },
    });
    Ok(())
}
