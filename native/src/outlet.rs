//! A connection's unsent bytes, written by Python (control replies, deliveries it
//! routes) and by the codec's fast path alike, so both keep one order.
//!
//! `ingest/parser/outlet.py` is the reference implementation.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

/// Past this capacity a flushed buffer is given back rather than kept for the next burst.
const KEEP: usize = 1 << 16;

#[pyclass(module = "jetlake_native")]
pub struct Outlet {
    buf: Vec<u8>,
    /// Negotiated by CONNECT: HMSG for a header-carrying message, else MSG without them.
    #[pyo3(get, set)]
    headers: bool,
    /// Messages and payload bytes framed here (the connection's out_msgs and out_bytes).
    #[pyo3(get)]
    msgs: u64,
    #[pyo3(get)]
    bytes: u64,
    dirty: bool,
    /// What the fast path calls as `notify(owner)` when it dirties a clean outlet.
    owner: Option<Py<PyAny>>,
    notify: Option<Py<PyAny>>,
}

fn push_number(buf: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[at..]);
}

/// The bytes of any buffer: a `bytes` object as is, anything else (a memoryview) copied.
fn bytes_of<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.clone());
    }
    let builtins = obj.py().import("builtins")?;
    Ok(builtins
        .getattr("bytes")?
        .call1((obj,))?
        .cast_into::<PyBytes>()?)
}

/// A delivery tuple's subject, header block (None when it has none) and payload.
type Delivery<'py> = (
    Bound<'py, PyBytes>,
    Option<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
);

/// Items 0 to 2 of a delivery tuple (subject, hdr or None, payload) as bytes.
fn delivery<'py>(wire: &Bound<'py, PyTuple>) -> PyResult<Delivery<'py>> {
    let hdr = wire.get_item(1)?;
    let hdr = if hdr.is_none() {
        None
    } else {
        Some(bytes_of(&hdr)?)
    };
    Ok((
        bytes_of(&wire.get_item(0)?)?,
        hdr,
        bytes_of(&wire.get_item(2)?)?,
    ))
}

/// `reply` made `prefix` followed by a delivery's five numbers (items 3 to 7 of `wire`)
/// joined by dots, as `outlet.dotted` spells them.
fn ack_reply(reply: &mut Vec<u8>, prefix: &[u8], wire: &Bound<'_, PyTuple>) -> PyResult<()> {
    reply.clear();
    reply.extend_from_slice(prefix);
    for i in 3..8 {
        if i > 3 {
            reply.push(b'.');
        }
        let n = wire.get_item(i)?.extract::<i64>()?;
        if n < 0 {
            reply.push(b'-');
        }
        push_number(reply, n.unsigned_abs() as usize);
    }
    Ok(())
}

/// A consumer's run to an inbox a peer wants, as the HMSGs `Cluster.deliver_run` sends:
/// routed on `routed` in `account`, each with the header block naming its own subject
/// (`shown_prefix`, the subject, CRLF, then its own block if any) and its ack reply.
/// Returns the frames and the run's header and payload bytes (its own blocks).
#[pyfunction]
pub fn frame_routed_run<'py>(
    py: Python<'py>,
    account: &[u8],
    routed: &[u8],
    prefix: &[u8],
    shown_prefix: &[u8],
    msgs: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyBytes>, u64)> {
    let mut out = Vec::new();
    let mut reply = Vec::with_capacity(prefix.len() + 64);
    let mut size = 0u64;
    for item in msgs.try_iter()? {
        let item = item?;
        let wire = item.cast::<PyTuple>()?;
        let (subject, own, payload) = delivery(wire)?;
        let own = own.as_ref().map_or(&b""[..], |h| h.as_bytes());
        let payload = payload.as_bytes();
        ack_reply(&mut reply, prefix, wire)?;
        let hlen = shown_prefix.len() + subject.as_bytes().len() + 2 + own.len();
        out.extend_from_slice(b"HMSG ");
        out.extend_from_slice(account);
        out.push(b' ');
        out.extend_from_slice(routed);
        out.push(b' ');
        out.extend_from_slice(&reply);
        out.push(b' ');
        push_number(&mut out, hlen);
        out.push(b' ');
        push_number(&mut out, hlen + payload.len());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(shown_prefix);
        out.extend_from_slice(subject.as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(own);
        out.extend_from_slice(payload);
        out.extend_from_slice(b"\r\n");
        size += (payload.len() + own.len()) as u64;
    }
    Ok((PyBytes::new(py, &out), size))
}

impl Outlet {
    /// Frames one MSG or HMSG as `nats.encode_msg`/`encode_hmsg` do; true when the
    /// outlet was clean before.
    pub fn frame(
        &mut self,
        subject: &[u8],
        sid: &[u8],
        reply: &[u8],
        hdr: Option<&[u8]>,
        payload: &[u8],
    ) -> bool {
        let b = &mut self.buf;
        let hdr = hdr.filter(|_| self.headers);
        b.extend_from_slice(if hdr.is_some() { b"HMSG " } else { b"MSG " });
        b.extend_from_slice(subject);
        b.push(b' ');
        b.extend_from_slice(sid);
        b.push(b' ');
        if !reply.is_empty() {
            b.extend_from_slice(reply);
            b.push(b' ');
        }
        match hdr {
            Some(h) => {
                push_number(b, h.len());
                b.push(b' ');
                push_number(b, h.len() + payload.len());
                b.extend_from_slice(b"\r\n");
                b.extend_from_slice(h);
            }
            None => {
                push_number(b, payload.len());
                b.extend_from_slice(b"\r\n");
            }
        }
        b.extend_from_slice(payload);
        b.extend_from_slice(b"\r\n");
        self.msgs += 1;
        self.bytes += payload.len() as u64;
        self.mark()
    }

    fn mark(&mut self) -> bool {
        let was = self.dirty;
        self.dirty = true;
        !was
    }

    /// The `notify(owner)` call the fast path owes after dirtying this outlet.
    pub fn notice(&self, py: Python<'_>) -> Option<(Py<PyAny>, Py<PyAny>)> {
        match (&self.notify, &self.owner) {
            (Some(n), Some(o)) => Some((n.clone_ref(py), o.clone_ref(py))),
            _ => None,
        }
    }
}

#[pymethods]
impl Outlet {
    #[new]
    #[pyo3(signature = (owner=None, notify=None))]
    fn new(owner: Option<Py<PyAny>>, notify: Option<Py<PyAny>>) -> Self {
        Self {
            buf: Vec::new(),
            headers: false,
            msgs: 0,
            bytes: 0,
            dirty: false,
            owner,
            notify,
        }
    }

    /// Appends raw protocol bytes; true when the outlet was clean before.
    fn write(&mut self, data: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.buf.extend_from_slice(bytes_of(data)?.as_bytes());
        Ok(self.mark())
    }

    /// One delivery; true when the outlet was clean before.
    #[pyo3(signature = (subject, sid, reply, hdr, payload))]
    fn msg(
        &mut self,
        subject: &Bound<'_, PyAny>,
        sid: &Bound<'_, PyAny>,
        reply: &Bound<'_, PyAny>,
        hdr: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let hdr = if hdr.is_none() {
            None
        } else {
            Some(bytes_of(hdr)?)
        };
        Ok(self.frame(
            bytes_of(subject)?.as_bytes(),
            bytes_of(sid)?.as_bytes(),
            bytes_of(reply)?.as_bytes(),
            hdr.as_ref().map(|h| h.as_bytes()),
            bytes_of(payload)?.as_bytes(),
        ))
    }

    /// A run of deliveries to one subscription, each a (subject, hdr, payload, and five
    /// numbers) tuple, framed as `msg` frames each with the reply `prefix` followed by the
    /// numbers joined by dots (`outlet.dotted`): a consumer's run, `$JS.ACK` replies and
    /// all, in one call. Returns whether the outlet was clean before (and the run not
    /// empty), and the run's header and payload bytes.
    fn run(
        &mut self,
        sid: &Bound<'_, PyAny>,
        prefix: &Bound<'_, PyAny>,
        msgs: &Bound<'_, PyAny>,
    ) -> PyResult<(bool, u64)> {
        let sid = bytes_of(sid)?;
        let prefix = bytes_of(prefix)?;
        let was = self.dirty;
        let mut size = 0u64;
        let mut any = false;
        let mut reply = Vec::with_capacity(prefix.as_bytes().len() + 64);
        for item in msgs.try_iter()? {
            let item = item?;
            let wire = item.cast::<PyTuple>()?;
            let (subject, hdr, payload) = delivery(wire)?;
            ack_reply(&mut reply, prefix.as_bytes(), wire)?;
            let hdr = hdr.as_ref().map(|h| h.as_bytes());
            size += (payload.as_bytes().len() + hdr.map_or(0, <[u8]>::len)) as u64;
            self.frame(
                subject.as_bytes(),
                sid.as_bytes(),
                &reply,
                hdr,
                payload.as_bytes(),
            );
            any = true;
        }
        Ok((any && !was, size))
    }

    /// Everything queued, leaving the outlet clean and empty.
    fn take<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        self.dirty = false;
        let out = PyBytes::new(py, &self.buf);
        if self.buf.capacity() > KEEP {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        out
    }

    fn __len__(&self) -> usize {
        self.buf.len()
    }

    /// The connection is gone: drop its bytes and the references back to it.
    fn close(&mut self) {
        self.buf = Vec::new();
        self.owner = None;
        self.notify = None;
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(o) = &self.owner {
            visit.call(o)?;
        }
        if let Some(n) = &self.notify {
            visit.call(n)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.owner = None;
        self.notify = None;
    }
}
