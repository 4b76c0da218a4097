//! The compiled fast path of jetlake's client-protocol codec.
//!
//! `ingest/parser/nats.py` is the reference: this module parses the per-message
//! operations (PUB, HPUB, PING, PONG) and frames MSG/HMSG, and hands every other
//! control line (CONNECT, SUB, UNSUB, INFO, unknown) to the reference codec itself,
//! so the rare operations have one implementation. It builds the reference's own
//! operation objects, which is what lets property tests compare the two outputs.
//!
//! Its fast path goes further: a PUB/HPUB whose subject `Routes` knows is framed
//! straight into the subscribers' `Outlet`s during `receive`, and never becomes a
//! Python object. That holds only until the first operation Python must see in a
//! read: after it, every PUB is returned, so each connection's bytes keep the
//! order the reference path (`Client._dispatch`) gives them.
//!
//! A plain ack (`$JS.ACK…`, no reply, no headers, an empty, `+ACK` or `+OK` body) to a
//! consumer `Routes` knows becomes no `Pub` either, under the same rule: consecutive
//! ones to one consumer are one `AckRun` in the operations, which `Client` hands to
//! the consumer whole. Likewise consecutive PUBs (no headers) to one subject only a
//! stream takes are one `PubRun`, which the stream admits and proposes whole.

mod entries;
mod frames;
mod ipc;
mod leafnodes;
mod outlet;
mod raft_codec;
mod route_split;
mod routes;
mod runs;
mod s2;

use outlet::Outlet;
use routes::{frame_into, frame_rmsg, send_notices, Route, Routes};
use runs::{close_run, is_plain_ack, join_run, AckRun, Gathering, PubRun};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use pyo3::{ffi, intern};
use std::cmp::Ordering;

/// A PUB/HPUB whose payload has not fully arrived yet.
struct Pending {
    subject: Vec<u8>,
    reply: Vec<u8>,
    hlen: Option<usize>,
    total: usize,
}

/// What a control line turned into.
enum Control {
    Op(Py<PyAny>),
    /// Nothing to emit yet or at all: a PUB waiting for its payload, an ignored INFO.
    Nothing,
    /// A protocol violation: its -ERR text, or None where the reference closes silently.
    Fail(Py<PyAny>),
}

/// Parses what a client sends, as `nats.ServerCodec` does; built by `fast.server_codec`.
#[pyclass(module = "jetlake_native")]
struct ServerCodec {
    pure: Py<PyAny>,
    pub_cls: Py<PyAny>,
    violation_cls: Py<PyAny>,
    ping: Py<PyAny>,
    pong: Py<PyAny>,
    err_unknown_op: Py<PyAny>,
    err_max_control_line: Py<PyAny>,
    err_max_payload: Py<PyAny>,
    max_control_line: usize,
    max_payload: usize,
    headers: bool,
    buf: Vec<u8>,
    pending: Option<Pending>,
    dead: bool,
    /// Set by the client once per-message checks are off (see `Client._fast_path`).
    routes: Option<Py<Routes>>,
    no_responders: bool,
    /// Fast-path counts not yet taken: in msgs, in bytes, out msgs, out bytes.
    stats: [u64; 4],
    /// `notify(owner)` calls owed for outlets the fast path dirtied.
    notices: Vec<(Py<PyAny>, Py<PyAny>)>,
}

/// Frames a whole PUB into its targets' outlets; false when Python must route it.
#[allow(clippy::too_many_arguments)]
fn route_fast(
    py: Python<'_>,
    routes: &mut Routes,
    p: &Pending,
    hdr: Option<&[u8]>,
    payload: &[u8],
    no_responders: bool,
    stats: &mut [u64; 4],
    notices: &mut Vec<(Py<PyAny>, Py<PyAny>)>,
) -> bool {
    let Some(Route::Fast(targets)) = routes.get_mut(&p.subject) else {
        return false;
    };
    if targets.is_empty() && no_responders && !p.reply.is_empty() {
        return false; // the 503 is Python's
    }
    frame_into(py, targets, &p.subject, &p.reply, hdr, payload, notices);
    let size = (payload.len() + hdr.map_or(0, <[u8]>::len)) as u64;
    let n = targets.len() as u64;
    stats[0] += 1;
    stats[1] += size;
    stats[2] += n;
    stats[3] += n * size;
    routes.unsettled |= n > 0;
    true
}

fn is_space(b: u8) -> bool {
    // What Python's bytes.split() splits on.
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Up to `N` whitespace-separated tokens after the verb, and how many there were in all.
fn args<const N: usize>(line: &[u8]) -> ([&[u8]; N], usize) {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut count = 0usize;
    let mut seen_verb = false;
    let mut i = 0;
    let n = line.len();
    while i < n {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        if i >= n {
            break;
        }
        let start = i;
        while i < n && !is_space(line[i]) {
            i += 1;
        }
        if !seen_verb {
            seen_verb = true;
            continue;
        }
        if count < N {
            out[count] = &line[start..i];
        }
        count += 1;
    }
    (out, count)
}

/// A declared size's digits without leading zeros; None unless ASCII digits only.
fn digits(token: &[u8]) -> Option<&[u8]> {
    if token.is_empty() || !token.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let first = token.iter().position(|&b| b != b'0').unwrap_or(token.len());
    Some(&token[first..])
}

/// Compares two digit strings without leading zeros as the numbers they write.
fn compare(a: &[u8], b: &[u8]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// The value of a digit string, saturating: anything past usize is over every limit.
fn value(d: &[u8]) -> usize {
    d.iter()
        .try_fold(0usize, |acc, &b| {
            acc.checked_mul(10)?.checked_add((b - b'0') as usize)
        })
        .unwrap_or(usize::MAX)
}

fn upper4(line: &[u8]) -> [u8; 4] {
    let mut head = [0u8; 4];
    for (slot, b) in head.iter_mut().zip(line) {
        *slot = b.to_ascii_uppercase();
    }
    head
}

impl ServerCodec {
    /// A `nats.Pub` without running its generated `__init__` (the slots are set from C):
    /// the same object at half the cost, and this is once per message.
    fn new_pub(
        &self,
        py: Python<'_>,
        pending: &Pending,
        hdr: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let cls = self.pub_cls.bind(py);
        // SAFETY: `Pub` is a plain slotted class: generic allocation is how `object.__new__`
        // makes it, and every slot is assigned before the object is returned.
        let obj = unsafe {
            let raw = ffi::PyType_GenericAlloc(cls.as_ptr().cast::<ffi::PyTypeObject>(), 0);
            Bound::from_owned_ptr_or_err(py, raw)?
        };
        obj.setattr(intern!(py, "subject"), PyBytes::new(py, &pending.subject))?;
        obj.setattr(intern!(py, "reply"), PyBytes::new(py, &pending.reply))?;
        obj.setattr(intern!(py, "hdr"), hdr)?;
        obj.setattr(intern!(py, "payload"), payload)?;
        Ok(obj.unbind())
    }

    fn violation(&self, py: Python<'_>, error: Option<&Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let arg = match error {
            Some(e) => e.clone_ref(py),
            None => py.None(),
        };
        Ok(self.violation_cls.bind(py).call1((arg,))?.unbind())
    }

    fn pub_line(&mut self, py: Python<'_>, line: &[u8], headers: bool) -> PyResult<Control> {
        let want = if headers { 3 } else { 2 };
        let (a, count) = args::<4>(line);
        if count != want && count != want + 1 {
            return Ok(Control::Fail(py.None()));
        }
        let Some(total) = digits(a[count - 1]) else {
            return Ok(Control::Fail(py.None()));
        };
        let hlen = if headers {
            let Some(h) = digits(a[count - 2]) else {
                return Ok(Control::Fail(py.None()));
            };
            if compare(h, total) == Ordering::Greater {
                return Ok(Control::Fail(py.None()));
            }
            Some(value(h))
        } else {
            None
        };
        let total = value(total);
        if total > self.max_payload {
            return Ok(Control::Fail(self.err_max_payload.clone_ref(py)));
        }
        let reply: &[u8] = if count == want + 1 { a[1] } else { b"" };
        self.pending = Some(Pending {
            subject: a[0].to_vec(),
            reply: reply.to_vec(),
            hlen,
            total,
        });
        Ok(Control::Nothing)
    }

    fn control(&mut self, py: Python<'_>, line: &[u8]) -> PyResult<Control> {
        let head = upper4(line);
        match &head {
            b"PUB " | b"PUB\t" => return self.pub_line(py, line, false),
            b"HPUB" => {
                if !self.headers {
                    return Ok(Control::Fail(py.None()));
                }
                return self.pub_line(py, line, true);
            }
            b"PING" => return Ok(Control::Op(self.ping.clone_ref(py))),
            b"PONG" => return Ok(Control::Op(self.pong.clone_ref(py))),
            _ => {}
        }
        // Everything else is rare: the reference codec decides, and keeps `headers`.
        let pure = self.pure.bind(py);
        let op = pure.call_method1("_control", (PyBytes::new(py, line),))?;
        if &head == b"CONN" {
            self.headers = pure.getattr("headers")?.is_truthy()?;
        }
        if op.is_none() {
            return Ok(Control::Nothing);
        }
        if op.get_type().is(self.violation_cls.bind(py)) {
            return Ok(Control::Fail(op.getattr("error")?.unbind()));
        }
        Ok(Control::Op(op.unbind()))
    }

    fn fail<'py>(
        &mut self,
        py: Python<'py>,
        mut ops: Vec<Py<PyAny>>,
        error: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.dead = true;
        self.buf = Vec::new();
        let error = if error.is_none(py) {
            None
        } else {
            Some(&error)
        };
        ops.push(self.violation(py, error)?);
        PyList::new(py, ops)
    }
}

#[pymethods]
impl ServerCodec {
    #[new]
    fn new(py: Python<'_>, pure: Py<PyAny>, module: &Bound<'_, PyModule>) -> PyResult<Self> {
        let p = pure.bind(py);
        Ok(Self {
            max_control_line: p.getattr("max_control_line")?.extract()?,
            max_payload: p.getattr("max_payload")?.extract()?,
            headers: p.getattr("headers")?.is_truthy()?,
            pub_cls: module.getattr("Pub")?.unbind(),
            violation_cls: module.getattr("Violation")?.unbind(),
            ping: module.getattr("_PING")?.unbind(),
            pong: module.getattr("_PONG")?.unbind(),
            err_unknown_op: module.getattr("ERR_UNKNOWN_OP")?.unbind(),
            err_max_control_line: module.getattr("ERR_MAX_CONTROL_LINE")?.unbind(),
            err_max_payload: module.getattr("ERR_MAX_PAYLOAD")?.unbind(),
            pure,
            buf: Vec::new(),
            pending: None,
            dead: false,
            routes: None,
            no_responders: false,
            stats: [0; 4],
            notices: Vec::new(),
        })
    }

    /// Negotiated by CONNECT; HPUB is refused before.
    #[getter]
    fn headers(&self) -> bool {
        self.headers
    }

    #[setter]
    fn set_headers(&mut self, py: Python<'_>, value: bool) -> PyResult<()> {
        self.headers = value;
        self.pure.bind(py).setattr("headers", value)
    }

    /// Route PUBs through `routes` (None: return every PUB); `no_responders` is the
    /// client's CONNECT option, whose 503 Python sends.
    #[pyo3(signature = (routes, no_responders))]
    fn route_with(&mut self, routes: Option<Py<Routes>>, no_responders: bool) {
        self.routes = routes;
        self.no_responders = no_responders;
    }

    /// What the fast path counted since the last call, None if it routed nothing:
    /// (in msgs, in bytes, out msgs, out bytes).
    fn take_stats(&mut self) -> Option<(u64, u64, u64, u64)> {
        if self.stats[0] == 0 {
            return None;
        }
        let [a, b, c, d] = std::mem::take(&mut self.stats);
        Some((a, b, c, d))
    }

    /// Every whole operation in the bytes seen so far, in order; PUBs the fast path
    /// routed are not among them.
    fn receive<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let result = self.parse(py, data);
        send_notices(py, std::mem::take(&mut self.notices))?;
        result
    }
}

impl ServerCodec {
    fn parse<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
        if self.dead {
            return Ok(PyList::empty(py));
        }
        let mut joined = std::mem::take(&mut self.buf);
        let buf: &[u8] = if joined.is_empty() {
            data
        } else {
            joined.extend_from_slice(data);
            &joined
        };
        let mut ops: Vec<Py<PyAny>> = Vec::new();
        let mut run: Option<Gathering> = None;
        // Whether an operation other than a run is in `ops`.
        let mut python_seen = false;
        // Whether acks may still be gathered: an UNSUB only takes receivers away, and a
        // consumer's sink is never a client's, so acks the table knows keep their one
        // receiver past it (a fetching client unsubscribes the batch's inbox before it
        // acks the batch's last messages).
        let mut acks_open = true;
        let routes_ref = self.routes.as_ref().map(|r| r.clone_ref(py));
        let mut routes = routes_ref.as_ref().map(|r| r.borrow_mut(py));
        let end = buf.len();
        let mut pos = 0usize;
        while pos < end {
            if let Some(pending) = self.pending.take() {
                let stop = pos.saturating_add(pending.total);
                if stop.saturating_add(2) > end {
                    self.pending = Some(pending);
                    break;
                }
                if &buf[stop..stop + 2] != b"\r\n" {
                    close_run(py, &mut run, &mut ops)?;
                    let err = self.err_unknown_op.clone_ref(py);
                    return self.fail(py, ops, err);
                }
                // Only before the read's first operation for Python other than a PING or
                // PONG (or, for acks, an UNSUB), which may change who takes acks (a SUB to
                // `$JS.ACK.>`, a consumer delete) or a subject (a SUB, an UNSUB, a
                // stream's update); runs change neither.
                if let (Some(r), None, true) = (routes.as_deref(), pending.hlen, acks_open) {
                    let payload = &buf[pos..stop];
                    let plain = pending.reply.is_empty() && is_plain_ack(payload);
                    let ack = if plain { r.ack(&pending.subject) } else { None };
                    if let Some((sink, seqs)) = ack {
                        join_run(py, &mut run, &mut ops, sink, None, false)?;
                        if let Some(Gathering::Acks {
                            seqs: all, size, ..
                        }) = run.as_mut()
                        {
                            all.extend(seqs);
                            *size += payload.len() as u64;
                        }
                        pos = stop + 2;
                        continue;
                    }
                    let peer = if plain {
                        r.peer_ack(&pending.subject)
                    } else {
                        None
                    };
                    if let Some((peer, seqs)) = peer {
                        join_run(py, &mut run, &mut ops, &peer.route, None, true)?;
                        if let Some(Gathering::Acks {
                            seqs: all,
                            size,
                            frames: Some(frames),
                            ..
                        }) = run.as_mut()
                        {
                            all.extend(seqs);
                            *size += payload.len() as u64;
                            frame_rmsg(frames, &peer.account, &pending.subject, b"", payload);
                        }
                        pos = stop + 2;
                        continue;
                    }
                    let subject = Some(pending.subject.as_slice());
                    let intake = if python_seen {
                        None
                    } else {
                        r.intake(&pending.subject)
                    };
                    if let Some(sink) = intake {
                        join_run(py, &mut run, &mut ops, sink, subject, false)?;
                        if let Some(Gathering::Pubs {
                            replies,
                            payloads,
                            size,
                            ..
                        }) = run.as_mut()
                        {
                            replies.push(PyBytes::new(py, &pending.reply).into_any().unbind());
                            payloads.push(PyBytes::new(py, payload).into_any().unbind());
                            *size += payload.len() as u64;
                        }
                        pos = stop + 2;
                        continue;
                    }
                }
                if ops.is_empty() && run.is_none() {
                    if let Some(r) = routes.as_deref_mut() {
                        let (hdr, payload) = match pending.hlen {
                            Some(h) => (Some(&buf[pos..pos + h]), &buf[pos + h..stop]),
                            None => (None, &buf[pos..stop]),
                        };
                        let nr = self.no_responders;
                        let (stats, notices) = (&mut self.stats, &mut self.notices);
                        if route_fast(py, r, &pending, hdr, payload, nr, stats, notices) {
                            pos = stop + 2;
                            continue;
                        }
                    }
                }
                let (hdr, payload) = match pending.hlen {
                    Some(h) => (
                        PyBytes::new(py, &buf[pos..pos + h]).into_any(),
                        PyBytes::new(py, &buf[pos + h..stop]),
                    ),
                    None => (py.None().into_bound(py), PyBytes::new(py, &buf[pos..stop])),
                };
                close_run(py, &mut run, &mut ops)?;
                ops.push(self.new_pub(py, &pending, &hdr, payload.as_any())?);
                python_seen = true;
                acks_open = false;
                pos = stop + 2;
                continue;
            }
            let Some(offset) = buf[pos..].iter().position(|&b| b == b'\n') else {
                if end - pos > self.max_control_line {
                    close_run(py, &mut run, &mut ops)?;
                    let err = self.err_max_control_line.clone_ref(py);
                    return self.fail(py, ops, err);
                }
                break;
            };
            let nl = pos + offset;
            let mut line = &buf[pos..nl];
            pos = nl + 1;
            if let Some((b'\r', rest)) = line.split_last() {
                line = rest;
            }
            if line.len() > self.max_control_line {
                close_run(py, &mut run, &mut ops)?;
                let err = self.err_max_control_line.clone_ref(py);
                return self.fail(py, ops, err);
            }
            let unsub = upper4(line) == *b"UNSU";
            match self.control(py, line)? {
                Control::Nothing => {}
                Control::Op(op) => {
                    close_run(py, &mut run, &mut ops)?;
                    // A PING or PONG changes no routing: runs may follow it.
                    let routing = !(op.is(&self.ping) || op.is(&self.pong));
                    python_seen |= routing;
                    acks_open &= !routing || unsub;
                    ops.push(op);
                }
                Control::Fail(error) => {
                    close_run(py, &mut run, &mut ops)?;
                    return self.fail(py, ops, error);
                }
            }
        }
        if pos < end {
            // A payload arriving over many reads is appended to, not copied each time.
            if joined.is_empty() {
                self.buf = data[pos..].to_vec();
            } else {
                joined.drain(..pos);
                self.buf = joined;
            }
        }
        close_run(py, &mut run, &mut ops)?;
        PyList::new(py, ops)
    }
}

fn frame<'py>(py: Python<'py>, parts: &[&[u8]]) -> Bound<'py, PyBytes> {
    let len = parts.iter().map(|p| p.len()).sum();
    PyBytes::new_with(py, len, |out| {
        let mut at = 0;
        for part in parts {
            out[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        Ok(())
    })
    .expect("writing into a fresh bytes object cannot fail")
}

/// The arguments' bytes when every one is a `bytes` object; None sends the call to the
/// reference encoder, which takes any buffer (a bytearray, a memoryview).
fn all_bytes<'a, const N: usize>(args: [&'a Bound<'_, PyAny>; N]) -> Option<[&'a [u8]; N]> {
    let mut out: [&[u8]; N] = [&[]; N];
    for (slot, arg) in out.iter_mut().zip(args) {
        *slot = arg.cast::<PyBytes>().ok()?.as_bytes();
    }
    Some(out)
}

fn reference<'py>(
    py: Python<'py>,
    name: &str,
    args: &[&Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    let args = PyTuple::new(py, args)?;
    py.import("ingest.parser.nats")?.getattr(name)?.call1(args)
}

/// MSG framing, byte-identical to `nats.encode_msg`, in one allocation.
#[pyfunction]
fn encode_msg<'py>(
    py: Python<'py>,
    subject: &Bound<'py, PyAny>,
    sid: &Bound<'py, PyAny>,
    reply: &Bound<'py, PyAny>,
    payload: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let Some([subject, sid, reply, payload]) = all_bytes([subject, sid, reply, payload]) else {
        return reference(py, "encode_msg", &[subject, sid, reply, payload]);
    };
    let size = payload.len().to_string();
    let s = size.as_bytes();
    let framed = if reply.is_empty() {
        frame(
            py,
            &[
                b"MSG ", subject, b" ", sid, b" ", s, b"\r\n", payload, b"\r\n",
            ],
        )
    } else {
        frame(
            py,
            &[
                b"MSG ", subject, b" ", sid, b" ", reply, b" ", s, b"\r\n", payload, b"\r\n",
            ],
        )
    };
    Ok(framed.into_any())
}

/// HMSG framing, byte-identical to `nats.encode_hmsg`.
#[pyfunction]
fn encode_hmsg<'py>(
    py: Python<'py>,
    subject: &Bound<'py, PyAny>,
    sid: &Bound<'py, PyAny>,
    reply: &Bound<'py, PyAny>,
    hdr: &Bound<'py, PyAny>,
    payload: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let Some([subject, sid, reply, hdr, payload]) = all_bytes([subject, sid, reply, hdr, payload])
    else {
        return reference(py, "encode_hmsg", &[subject, sid, reply, hdr, payload]);
    };
    let hsize = hdr.len().to_string();
    let total = (hdr.len() + payload.len()).to_string();
    let (h, t) = (hsize.as_bytes(), total.as_bytes());
    let framed = if reply.is_empty() {
        frame(
            py,
            &[
                b"HMSG ", subject, b" ", sid, b" ", h, b" ", t, b"\r\n", hdr, payload, b"\r\n",
            ],
        )
    } else {
        let parts: [&[u8]; 14] = [
            b"HMSG ", subject, b" ", sid, b" ", reply, b" ", h, b" ", t, b"\r\n", hdr, payload,
            b"\r\n",
        ];
        frame(py, &parts)
    };
    Ok(framed.into_any())
}

#[pymodule]
fn jetlake_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ServerCodec>()?;
    m.add_class::<Outlet>()?;
    m.add_class::<Routes>()?;
    m.add_class::<AckRun>()?;
    m.add_class::<PubRun>()?;
    m.add_function(wrap_pyfunction!(ipc::encode_batch, m)?)?;
    m.add_function(wrap_pyfunction!(entries::decode_publishes, m)?)?;
    m.add_function(wrap_pyfunction!(entries::run_rows, m)?)?;
    m.add_function(wrap_pyfunction!(entries::encode_publishes, m)?)?;
    m.add_function(wrap_pyfunction!(outlet::frame_routed_run, m)?)?;
    m.add_function(wrap_pyfunction!(encode_msg, m)?)?;
    m.add_function(wrap_pyfunction!(encode_hmsg, m)?)?;
    m.add_function(wrap_pyfunction!(leafnodes::split_leaf, m)?)?;
    m.add_function(wrap_pyfunction!(leafnodes::frame_run, m)?)?;
    m.add_function(wrap_pyfunction!(route_split::split_route, m)?)?;
    m.add_function(wrap_pyfunction!(raft_codec::decode_raft, m)?)?;
    m.add_class::<s2::S2Reader>()?;
    m.add_function(wrap_pyfunction!(s2::s2_encode_stream, m)?)?;
    m.add_function(wrap_pyfunction!(s2::s2_encode_block, m)?)?;
    m.add_function(wrap_pyfunction!(s2::s2_decode_block, m)?)?;
    Ok(())
}
