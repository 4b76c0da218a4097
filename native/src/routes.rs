//! Where each recently published subject goes, for the codec's fast path.
//!
//! The Python sublist stays the source of truth: `Client` fills an entry from its
//! match (`learn_route` in ingest/server/client.py) and the sublist clears the table
//! on every SUB and UNSUB, as it clears its own caches. An entry either lists
//! plain client subscriptions to frame into, or says the subject needs Python
//! (queue groups, internal subscribers, per-message checks).
//!
//! Acks are one-off subjects, so they are known by their consumer's prefix instead:
//! `$JS.ACK.<stream>.<consumer>.` maps to the consumer's batch sink once the sublist
//! showed that sink is the prefix's only receiver (`learn_acks` in
//! ingest/server/subscription.py). The codec hands a read's plain acks to it as one
//! `AckRun` operation, in order among the read's other operations.
//!
//! A subject whose only receiver is a stream is learnt as that stream's intake
//! (`learn_route`): the codec hands a read's PUBs to it as one `PubRun`. So is a prefix
//! whose every `prefix.<token>` goes to one stream alone (`learn_intake_tail`): a KV
//! bucket's keys, each published once, would otherwise never be learnt.
//!
//! The server's own replies to a peer's inboxes (PubAcks to a client on another
//! server) are known by prefix too, as the one route that alone takes every
//! `prefix.<token>` (`learn_peer_tail`): a run of them is framed as RMSGs and handed
//! to that route in one call.

use crate::outlet::Outlet;
use crate::runs::is_plain_ack;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::collections::HashMap;

/// As many subjects as the sublist's own exact cache keeps.
const LIMIT: usize = 4096;
const ACK: &[u8] = b"$JS.ACK.";

pub struct Target {
    pub outlet: Py<Outlet>,
    pub sid: Vec<u8>,
    sub: Py<PyAny>,
    /// Deliveries not yet added to the subscription's `_delivered`.
    pub count: u64,
}

/// Frame one message into every target's outlet, counting it; the `notify(owner)` calls
/// owed for outlets it dirtied go to `notices`.
pub fn frame_into(
    py: Python<'_>,
    targets: &mut [Target],
    subject: &[u8],
    reply: &[u8],
    hdr: Option<&[u8]>,
    payload: &[u8],
    notices: &mut Vec<(Py<PyAny>, Py<PyAny>)>,
) {
    for t in targets.iter_mut() {
        let mut outlet = t.outlet.borrow_mut(py);
        if outlet.frame(subject, &t.sid, reply, hdr, payload) {
            notices.extend(outlet.notice(py));
        }
        t.count += 1;
    }
}

/// Make the `notify(owner)` calls `frame_into` collected, once the framing is done.
pub fn send_notices(py: Python<'_>, notices: Vec<(Py<PyAny>, Py<PyAny>)>) -> PyResult<()> {
    for (notify, owner) in notices {
        notify.call1(py, (owner,))?;
    }
    Ok(())
}

fn targets(list: Vec<Learnt<'_>>) -> Vec<Target> {
    list.into_iter()
        .map(|(outlet, sid, sub)| Target {
            outlet,
            sid: sid.as_bytes().to_vec(),
            sub,
            count: 0,
        })
        .collect()
}

pub enum Route {
    /// Python routes it (the codec returns the Pub op).
    Slow,
    Fast(Vec<Target>),
    /// A stream's `intake` alone takes it: PUBs without headers go to it in runs.
    Intake(Py<PyAny>),
}

/// What `learn` is given per target: (outlet, sid, subscription).
type Learnt<'py> = (Py<Outlet>, Bound<'py, PyBytes>, Py<PyAny>);

/// The route that alone takes a prefix's subjects (it has `send_run(data, msgs, size)`),
/// and the account's name on the wire.
pub struct PeerTail {
    pub account: Vec<u8>,
    pub route: Py<PyAny>,
}

/// RMSGs framed for one route during one call, handed over once the call is done.
struct Pending {
    route: Py<PyAny>,
    buf: Vec<u8>,
    msgs: u64,
    size: u64,
}

/// Frame one RMSG without headers or queue groups as `encode_rmsg` does.
pub fn frame_rmsg(buf: &mut Vec<u8>, account: &[u8], subject: &[u8], reply: &[u8], payload: &[u8]) {
    buf.extend_from_slice(b"RMSG ");
    buf.extend_from_slice(account);
    buf.push(b' ');
    buf.extend_from_slice(subject);
    buf.push(b' ');
    if !reply.is_empty() {
        buf.extend_from_slice(reply);
        buf.push(b' ');
    }
    buf.extend_from_slice(payload.len().to_string().as_bytes());
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(payload);
    buf.extend_from_slice(b"\r\n");
}

#[pyclass(module = "jetlake_native")]
pub struct Routes {
    map: HashMap<Vec<u8>, Route>,
    /// A prefix → where every subject of one more token goes (a reply inbox's
    /// `_INBOX.<id>`), for the server's own publishes (`deliver_tail`).
    tails: HashMap<Vec<u8>, Vec<Target>>,
    /// A prefix → the one peer route that alone takes every `prefix.<token>` (a client's
    /// inbox on another server), for the server's own replies (`deliver_tails`).
    peers: HashMap<Vec<u8>, PeerTail>,
    /// A prefix → the stream intake that alone takes every `prefix.<token>`.
    intake_tails: HashMap<Vec<u8>, Py<PyAny>>,
    /// `$JS.ACK.<stream>.<consumer>.` → that consumer's `acks(seqs)` sink.
    acks: HashMap<Vec<u8>, Py<PyAny>>,
    /// `$JS.ACK.<stream>.<consumer>.` → the route to the consumer's server, which alone
    /// takes its acks: a read's plain acks go to it as RMSGs in one write.
    peer_acks: HashMap<Vec<u8>, PeerTail>,
    /// Some target has counts to settle: monitoring asks for every subscription's count,
    /// and only the first ask after deliveries walks the table.
    pub unsettled: bool,
}

impl Routes {
    pub fn get_mut(&mut self, subject: &[u8]) -> Option<&mut Route> {
        self.map.get_mut(subject)
    }

    /// The stream intake that alone takes `subject`, if learnt for it or for its prefix
    /// (a subject learnt otherwise keeps its own entry).
    pub fn intake(&self, subject: &[u8]) -> Option<&Py<PyAny>> {
        match self.map.get(subject) {
            Some(Route::Intake(sink)) => Some(sink),
            Some(_) => None,
            None if self.intake_tails.is_empty() => None,
            None => self.intake_tails.get(tail_prefix(subject)?),
        }
    }

    /// Frame one of the server's own messages into the targets its subject's prefix
    /// learnt, or (`peers`) into the RMSGs `pending` for the route that learnt it; None
    /// where Python must route it (see `deliver_tail`).
    #[allow(clippy::too_many_arguments)]
    fn tail(
        &mut self,
        py: Python<'_>,
        subject: &[u8],
        reply: &[u8],
        hdr: Option<&[u8]>,
        payload: &[u8],
        notices: &mut Vec<(Py<PyAny>, Py<PyAny>)>,
        pending: Option<&mut Vec<Pending>>,
    ) -> Option<usize> {
        let prefix = tail_prefix(subject)?;
        if let Some(targets) = self.tails.get_mut(prefix) {
            frame_into(py, targets, subject, reply, hdr, payload, notices);
            let n = targets.len();
            self.unsettled |= n > 0;
            return Some(n);
        }
        let pending = pending.filter(|_| hdr.is_none())?;
        let peer = self.peers.get(prefix)?;
        let at = match pending.iter().position(|p| p.route.is(&peer.route)) {
            Some(at) => at,
            None => {
                pending.push(Pending {
                    route: peer.route.clone_ref(py),
                    buf: Vec::new(),
                    msgs: 0,
                    size: 0,
                });
                pending.len() - 1
            }
        };
        let out = &mut pending[at];
        frame_rmsg(&mut out.buf, &peer.account, subject, reply, payload);
        out.msgs += 1;
        out.size += payload.len() as u64;
        Some(1)
    }

    /// The learnt sink of a plain ack on `subject` and its (delivered, stream seq, consumer
    /// seq); None where Python must route it: an unknown consumer, an empty token (which
    /// matches nothing), fewer than five tokens after the prefix, or a number the
    /// reference's `int()` would read differently (not plain digits, or too long).
    pub fn ack(&self, subject: &[u8]) -> Option<(&Py<PyAny>, [u64; 3])> {
        if self.acks.is_empty() {
            return None;
        }
        let (cut, seqs) = ack_parts(subject)?;
        Some((self.acks.get(&subject[..cut])?, seqs))
    }

    /// As `ack`, for a consumer on a peer: the route `learn_peer_acks` knows for its
    /// prefix (a client here acking what another server delivered).
    pub fn peer_ack(&self, subject: &[u8]) -> Option<(&PeerTail, [u64; 3])> {
        if self.peer_acks.is_empty() {
            return None;
        }
        let (cut, seqs) = ack_parts(subject)?;
        Some((self.peer_acks.get(&subject[..cut])?, seqs))
    }
}

/// The prefix a subject's tail entries are known by: all but its last token, or None
/// where that token is one the sublist's tail rule leaves to a walk (empty, `*`, `>`).
fn tail_prefix(subject: &[u8]) -> Option<&[u8]> {
    let dot = subject.iter().rposition(|&b| b == b'.')?;
    match &subject[dot + 1..] {
        b"" | b"*" | b">" => None,
        _ => Some(&subject[..dot]),
    }
}

/// Where an ack subject's consumer prefix (`$JS.ACK.<stream>.<consumer>.`) ends, and its
/// (delivered, stream seq, consumer seq); None for what `ack` leaves to Python.
fn ack_parts(subject: &[u8]) -> Option<(usize, [u64; 3])> {
    if !subject.starts_with(ACK) {
        return None;
    }
    {
        let mut dots = subject[ACK.len()..]
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'.');
        let (cut, _) = dots.nth(1)?;
        let cut = ACK.len() + cut + 1;
        let mut seqs = [0u64; 3];
        let mut tokens = 0;
        for (i, token) in subject[cut..].split(|&b| b == b'.').enumerate() {
            if token.is_empty() {
                return None;
            }
            if i < 3 {
                seqs[i] = number(token)?;
            }
            tokens += 1;
        }
        (tokens >= 5).then_some((cut, seqs))
    }
}

/// Hand each route the RMSGs framed for it: `send_run(data, msgs, size)`.
fn send_pending(py: Python<'_>, pending: Vec<Pending>) -> PyResult<()> {
    for p in pending {
        let data = PyBytes::new(py, &p.buf);
        p.route
            .call_method1(py, intern!(py, "send_run"), (data, p.msgs, p.size))?;
    }
    Ok(())
}

fn number(token: &[u8]) -> Option<u64> {
    if token.len() > 19 || !token.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(token.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

#[pymethods]
impl Routes {
    #[new]
    fn new() -> Self {
        Self {
            map: HashMap::new(),
            tails: HashMap::new(),
            intake_tails: HashMap::new(),
            peers: HashMap::new(),
            acks: HashMap::new(),
            peer_acks: HashMap::new(),
            unsettled: false,
        }
    }

    /// Record a subject's targets as (outlet, sid, subscription) triples; None: Python routes it.
    fn learn(
        &mut self,
        py: Python<'_>,
        subject: &[u8],
        list: Option<Vec<Learnt<'_>>>,
    ) -> PyResult<()> {
        if self.map.len() >= LIMIT {
            self.clear(py, false)?;
        }
        let route = match list {
            None => Route::Slow,
            Some(list) => Route::Fast(targets(list)),
        };
        self.map.insert(subject.to_vec(), route);
        Ok(())
    }

    /// Record that a stream's `sink` alone takes `subject` (see `PubRun`).
    fn learn_intake(&mut self, py: Python<'_>, subject: &[u8], sink: Py<PyAny>) -> PyResult<()> {
        if self.map.len() >= LIMIT {
            self.clear(py, false)?;
        }
        self.map.insert(subject.to_vec(), Route::Intake(sink));
        Ok(())
    }

    /// Record that a stream's `sink` alone takes every `prefix.<token>`.
    fn learn_intake_tail(&mut self, prefix: &[u8], sink: Py<PyAny>) {
        if self.intake_tails.len() >= LIMIT {
            self.intake_tails.clear();
        }
        self.intake_tails.insert(prefix.to_vec(), sink);
    }

    /// Record where every subject `prefix.<token>` goes, for `deliver_tail` (a prefix
    /// learnt already keeps its entry, and the counts it has not settled).
    fn learn_tail(&mut self, py: Python<'_>, prefix: &[u8], list: Vec<Learnt<'_>>) -> PyResult<()> {
        if self.tails.contains_key(prefix) {
            return Ok(());
        }
        if self.tails.len() >= LIMIT {
            self.clear(py, false)?;
        }
        self.tails.insert(prefix.to_vec(), targets(list));
        Ok(())
    }

    /// Record that `route` alone takes every `prefix.<token>`, its account named `account`
    /// on the wire (a prefix learnt already keeps its entry).
    fn learn_peer_tail(
        &mut self,
        py: Python<'_>,
        prefix: &[u8],
        account: &[u8],
        route: Py<PyAny>,
    ) -> PyResult<()> {
        if self.peers.contains_key(prefix) {
            return Ok(());
        }
        if self.peers.len() >= LIMIT {
            self.clear(py, false)?;
        }
        let account = account.to_vec();
        self.peers
            .insert(prefix.to_vec(), PeerTail { account, route });
        Ok(())
    }

    /// Frame a message the server publishes itself (a PubAck, an API response) to a
    /// subject whose prefix `learn_tail` knows, or (`peers`, no headers) whose prefix
    /// `learn_peer_tail` knows; its receivers' count, or None where Python must route
    /// it: an unknown prefix, or a last token the sublist's tail rule leaves to a walk
    /// (empty, `*`, `>`). A message from a peer is never sent to another (`peers` false).
    #[pyo3(signature = (subject, reply, hdr, payload, peers = true))]
    fn deliver_tail(
        &mut self,
        py: Python<'_>,
        subject: &[u8],
        reply: &[u8],
        hdr: Option<&[u8]>,
        payload: &[u8],
        peers: bool,
    ) -> PyResult<Option<usize>> {
        let mut notices = Vec::new();
        let mut pending = Vec::new();
        let to = peers.then_some(&mut pending);
        let framed = self.tail(py, subject, reply, hdr, payload, &mut notices, to);
        send_notices(py, notices)?;
        send_pending(py, pending)?;
        Ok(framed)
    }

    /// `deliver_tail` for each (subject, payload) of `msgs` from `start` on (no reply, no
    /// headers: PubAcks), in order, up to the first Python must route: how many it
    /// framed, their payloads' bytes, their receivers and the bytes those received.
    /// Only the items it reads are converted: Python calls it again past each answer it
    /// routes itself, so converting the whole list each time made a run of answers to a
    /// peer's inboxes quadratic. Each route's RMSGs go to it in one call at the end.
    #[pyo3(signature = (msgs, start, peers = true))]
    fn deliver_tails(
        &mut self,
        py: Python<'_>,
        msgs: &Bound<'_, PyList>,
        start: usize,
        peers: bool,
    ) -> PyResult<(usize, u64, u64, u64)> {
        let mut notices = Vec::new();
        let mut pending = Vec::new();
        let (mut done, mut size, mut out, mut out_size) = (0usize, 0u64, 0u64, 0u64);
        for i in start..msgs.len() {
            let item = msgs.get_item(i)?;
            let Ok((subject, payload)) = item.extract::<(Bound<'_, PyBytes>, Bound<'_, PyBytes>)>()
            else {
                break; // Python routes what is not (bytes, bytes), and says what is wrong
            };
            let data = payload.as_bytes();
            let to = peers.then_some(&mut pending);
            let Some(n) = self.tail(py, subject.as_bytes(), b"", None, data, &mut notices, to)
            else {
                break;
            };
            done += 1;
            size += data.len() as u64;
            out += n as u64;
            out_size += (n * data.len()) as u64;
        }
        send_notices(py, notices)?;
        send_pending(py, pending)?;
        Ok((done, size, out, out_size))
    }

    /// Hand the leading plain acks of `msgs`, (subject, payload) pairs a peer routed here
    /// (a client on it acking a consumer this server leads), to the sinks `learn_acks`
    /// knows, each consumer's consecutive acks in one call as the codec's `AckRun` does;
    /// how many, up to the first Python must route.
    fn take_acks(slf: &Bound<'_, Self>, msgs: &Bound<'_, PyList>) -> PyResult<usize> {
        let py = slf.py();
        let mut runs: Vec<(Py<PyAny>, Vec<u64>)> = Vec::new();
        let mut done = 0usize;
        {
            let this = slf.borrow(); // released before the sinks run: they may change it
            for item in msgs.iter() {
                let Ok((subject, payload)) =
                    item.extract::<(Bound<'_, PyBytes>, Bound<'_, PyBytes>)>()
                else {
                    break;
                };
                if !is_plain_ack(payload.as_bytes()) {
                    break;
                }
                let Some((sink, seqs)) = this.ack(subject.as_bytes()) else {
                    break;
                };
                match runs.last_mut() {
                    Some((current, all)) if current.is(sink) => all.extend(seqs),
                    _ => runs.push((sink.clone_ref(py), seqs.to_vec())),
                }
                done += 1;
            }
        }
        for (sink, all) in runs {
            sink.call1(py, (all,))?;
        }
        Ok(done)
    }

    /// Send plain acks under `prefix` (`$JS.ACK.<stream>.<consumer>.`) to `route` (which
    /// has `forward_acks(data, msgs, size)`) as RMSGs in `account`, a read's in one write.
    fn learn_peer_acks(&mut self, prefix: &[u8], account: &[u8], route: Py<PyAny>) {
        if self.peer_acks.len() >= LIMIT {
            self.peer_acks.clear();
        }
        let account = account.to_vec();
        self.peer_acks
            .insert(prefix.to_vec(), PeerTail { account, route });
    }

    /// Send plain acks under `prefix` (`$JS.ACK.<stream>.<consumer>.`) to `sink` in runs.
    fn learn_acks(&mut self, prefix: &[u8], sink: Py<PyAny>) {
        if self.acks.len() >= LIMIT {
            self.acks.clear();
        }
        self.acks.insert(prefix.to_vec(), sink);
    }

    /// Add the fast path's deliveries to each subscription's count (monitoring, UNSUB max).
    fn settle(&mut self, py: Python<'_>) -> PyResult<()> {
        if !self.unsettled {
            return Ok(());
        }
        self.unsettled = false;
        let fast = self.map.values_mut().filter_map(|route| match route {
            Route::Fast(targets) => Some(targets),
            Route::Slow | Route::Intake(_) => None,
        });
        for targets in fast.chain(self.tails.values_mut()) {
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

    /// Forget every subject (interest changed), settling counts first; the consumers'
    /// ack sinks too unless `acks` is false (the change cannot touch `$JS.ACK.…`).
    #[pyo3(signature = (acks = true))]
    fn clear(&mut self, py: Python<'_>, acks: bool) -> PyResult<()> {
        self.settle(py)?;
        self.map.clear();
        self.tails.clear();
        self.intake_tails.clear();
        self.peers.clear();
        if acks {
            self.acks.clear();
            self.peer_acks.clear();
        }
        Ok(())
    }

    /// A learnt subject, tail prefix or ack prefix.
    fn __contains__(&self, subject: &[u8]) -> bool {
        self.map.contains_key(subject)
            || self.tails.contains_key(subject)
            || self.intake_tails.contains_key(subject)
            || self.peers.contains_key(subject)
            || self.acks.contains_key(subject)
            || self.peer_acks.contains_key(subject)
    }

    fn __len__(&self) -> usize {
        self.map.len()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for sink in self.acks.values().chain(self.intake_tails.values()) {
            visit.call(sink)?;
        }
        for peer in self.peers.values().chain(self.peer_acks.values()) {
            visit.call(&peer.route)?;
        }
        for route in self.map.values() {
            if let Route::Intake(sink) = route {
                visit.call(sink)?;
            }
        }
        let fast = self.map.values().filter_map(|route| match route {
            Route::Fast(targets) => Some(targets),
            Route::Slow | Route::Intake(_) => None,
        });
        for t in fast.chain(self.tails.values()).flatten() {
            visit.call(&t.outlet)?;
            visit.call(&t.sub)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.map.clear();
        self.tails.clear();
        self.intake_tails.clear();
        self.peers.clear();
        self.acks.clear();
        self.peer_acks.clear();
    }
}
