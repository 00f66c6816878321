//! `orderedstream._kafka_native`: one librdkafka consumer that reads a partition range in
//! batches (`rd_kafka_consume_batch_queue`, GIL released) and lays the records out as Arrow
//! buffers (validity bitmaps, int32 offsets, values) with no Python object per record.
//!
//! Python (`orderedstream.python_datasource.native_reader`) keeps every decision: range ends,
//! loss checks, error classes and messages. This module only moves bytes and reports what
//! librdkafka said (error events with their codes, watermarks, positions) as plain values.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use rdkafka_sys as rd;
use rdkafka_sys::types::RDKafkaRespErr;

/// Errors librdkafka reported through `error_cb` (code, reason), drained by Python.
type ErrorSink = Mutex<Vec<(i32, String)>>;

unsafe extern "C" fn error_cb(
    _rk: *mut rd::rd_kafka_t,
    err: c_int,
    reason: *const c_char,
    opaque: *mut c_void,
) {
    if opaque.is_null() {
        return;
    }
    let sink = &*(opaque as *const ErrorSink);
    let text = if reason.is_null() {
        String::new()
    } else {
        CStr::from_ptr(reason).to_string_lossy().into_owned()
    };
    if let Ok(mut errors) = sink.lock() {
        if errors.len() < 1000 {
            errors.push((err, text));
        }
    }
}

/// A raw pointer that may cross into a GIL-released closure (librdkafka handles are
/// thread-safe; the Python object holding them is borrowed mutably meanwhile).
#[derive(Clone, Copy)]
struct Raw<T>(*mut T);
unsafe impl<T> Send for Raw<T> {}

/// A validity bitmap (Arrow: LSB first) that stays unallocated while nothing is null.
#[derive(Default)]
struct Validity {
    bits: Vec<u8>,
    nulls: usize,
    len: usize,
}

impl Validity {
    fn push(&mut self, valid: bool) {
        if !valid && self.nulls == 0 {
            // First null: materialise the bitmap, every earlier entry valid.
            self.bits = vec![0u8; self.len / 8 + 1];
            for i in 0..self.len {
                self.bits[i / 8] |= 1 << (i % 8);
            }
        }
        if self.nulls > 0 || !valid {
            let byte = self.len / 8;
            if byte >= self.bits.len() {
                self.bits.push(0);
            }
            if valid {
                self.bits[byte] |= 1 << (self.len % 8);
            } else {
                self.nulls += 1;
            }
        }
        self.len += 1;
    }
}

/// A binary/string column: validity, int32 offsets, values.
struct Binary {
    validity: Validity,
    offsets: Vec<i32>,
    data: Vec<u8>,
}

impl Binary {
    fn with_capacity(n: usize) -> Self {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        Binary { validity: Validity::default(), offsets, data: Vec::new() }
    }

    fn push(&mut self, bytes: Option<&[u8]>) -> Result<(), String> {
        if let Some(b) = bytes {
            self.data.extend_from_slice(b);
        }
        let end = i32::try_from(self.data.len())
            .map_err(|_| "one Arrow batch would hold more than 2 GiB of keys, values or \
                          headers; lower arrowBatchMaxRecords"
                .to_string())?;
        self.offsets.push(end);
        self.validity.push(bytes.is_some());
        Ok(())
    }
}

fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
}

unsafe fn slice<'a>(p: *const c_void, len: usize) -> Option<&'a [u8]> {
    if p.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts(p as *const u8, len))
    }
}

/// The records of one `consume` call, as Arrow buffers, plus what Python needs to check them.
struct Fetched {
    total: usize,
    kept: usize,
    first: i64,
    last: i64,
    increasing: bool,
    head: Vec<i64>,
    events: Vec<(i32, i64, String)>,
    key: Binary,
    value: Binary,
    offsets: Vec<i64>,
    stamps: Vec<i64>,
    stamp_types: Vec<i32>,
    headers: Option<Headers>,
}

struct Headers {
    validity: Validity,
    offsets: Vec<i32>,
    names: Binary,
    values: Binary,
}

/// Lays out one record's headers (null list when it has none, as the Python reader does).
unsafe fn push_headers(h: &mut Headers, msg: *mut rd::rd_kafka_message_t) -> Result<(), String> {
    let mut hdrs: *mut rd::rd_kafka_headers_t = ptr::null_mut();
    let mut count = 0usize;
    if rd::rd_kafka_message_headers(msg, &mut hdrs) == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
        && !hdrs.is_null()
    {
        let n = rd::rd_kafka_header_cnt(hdrs);
        for idx in 0..n {
            let mut name: *const c_char = ptr::null();
            let mut value: *const c_void = ptr::null();
            let mut size = 0usize;
            if rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size)
                != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                break;
            }
            let key = if name.is_null() { &b""[..] } else { CStr::from_ptr(name).to_bytes() };
            match std::str::from_utf8(key) {
                Ok(k) => h.names.push(Some(k.as_bytes()))?,
                Err(_) => h.names.push(Some(String::from_utf8_lossy(key).as_bytes()))?,
            }
            h.values.push(slice(value, size))?;
            count += 1;
        }
    }
    let end = i32::try_from(h.names.offsets.len() - 1).map_err(|_| "too many headers".to_string())?;
    h.offsets.push(end);
    h.validity.push(count > 0);
    Ok(())
}

/// Consumes up to `max` messages (GIL released by the caller) and lays out those before `end`.
unsafe fn fetch(
    queue: *mut rd::rd_kafka_queue_t,
    max: usize,
    timeout_ms: c_int,
    end: i64,
    with_headers: bool,
) -> Result<Fetched, String> {
    let mut msgs: Vec<*mut rd::rd_kafka_message_t> = vec![ptr::null_mut(); max.max(1)];
    let n = rd::rd_kafka_consume_batch_queue(queue, timeout_ms, msgs.as_mut_ptr(), msgs.len());
    if n < 0 {
        let code = rd::rd_kafka_last_error();
        let text = CStr::from_ptr(rd::rd_kafka_err2str(code)).to_string_lossy().into_owned();
        return Err(format!("rd_kafka_consume_batch_queue failed: {text}"));
    }
    let msgs = &msgs[..n as usize];
    let mut f = Fetched {
        total: 0,
        kept: 0,
        first: -1,
        last: -1,
        increasing: true,
        head: Vec::new(),
        events: Vec::new(),
        key: Binary::with_capacity(msgs.len()),
        value: Binary::with_capacity(msgs.len()),
        offsets: Vec::with_capacity(msgs.len()),
        stamps: Vec::with_capacity(msgs.len()),
        stamp_types: Vec::with_capacity(msgs.len()),
        headers: with_headers.then(|| Headers {
            validity: Validity::default(),
            offsets: vec![0],
            names: Binary::with_capacity(0),
            values: Binary::with_capacity(0),
        }),
    };
    let mut last = i64::MIN;
    let mut result = Ok(());
    for &msg in msgs {
        let m = &*msg;
        if result.is_ok() {
            if m.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                let text = CStr::from_ptr(rd::rd_kafka_message_errstr(msg))
                    .to_string_lossy()
                    .into_owned();
                f.events.push((m.err as i32, m.offset, text));
            } else {
                if f.total == 0 {
                    f.first = m.offset;
                }
                if f.head.len() < 5 {
                    f.head.push(m.offset);
                }
                if m.offset <= last {
                    f.increasing = false;
                }
                last = m.offset;
                f.last = m.offset;
                f.total += 1;
                // Offsets ascend (else Python raises and nothing is kept): keep those < end.
                if f.increasing && m.offset < end {
                    result = push_record(&mut f, msg);
                    f.kept += 1;
                }
            }
        }
        rd::rd_kafka_message_destroy(msg);
    }
    result.map(|_| f)
}

unsafe fn push_record(f: &mut Fetched, msg: *mut rd::rd_kafka_message_t) -> Result<(), String> {
    let m = &*msg;
    f.key.push(slice(m.key, m.key_len))?;
    f.value.push(slice(m.payload, m.len))?;
    f.offsets.push(m.offset);
    let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    let ms = rd::rd_kafka_message_timestamp(msg, &mut kind);
    f.stamps.push(ms.saturating_mul(1000));
    f.stamp_types.push(kind as i32 - 1);
    if let Some(h) = f.headers.as_mut() {
        push_headers(h, msg)?;
    }
    Ok(())
}

fn bytes_or_none<'py>(py: Python<'py>, v: &Validity) -> PyObject {
    if v.nulls == 0 {
        py.None()
    } else {
        PyBytes::new(py, &v.bits).into_any().unbind()
    }
}

fn binary_tuple<'py>(py: Python<'py>, b: &Binary) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            bytes_or_none(py, &b.validity),
            PyBytes::new(py, as_bytes(&b.offsets)).into_any().unbind(),
            PyBytes::new(py, &b.data).into_any().unbind(),
            b.validity.nulls.into_pyobject(py)?.into_any().unbind(),
        ],
    )
}

/// One librdkafka consumer (no group management: the caller assigns one partition).
#[pyclass(module = "orderedstream._kafka_native")]
struct Consumer {
    rk: *mut rd::rd_kafka_t,
    queue: *mut rd::rd_kafka_queue_t,
    errors: *mut ErrorSink,
}

unsafe impl Send for Consumer {}
unsafe impl Sync for Consumer {}

impl Consumer {
    fn handle(&self) -> PyResult<*mut rd::rd_kafka_t> {
        if self.rk.is_null() {
            Err(PyRuntimeError::new_err("the native Kafka consumer is closed"))
        } else {
            Ok(self.rk)
        }
    }

    fn partition_list(topic: &str, partition: i32, offset: i64) -> PyResult<Raw<rd::rd_kafka_topic_partition_list_t>> {
        let name = CString::new(topic).map_err(|_| PyValueError::new_err("topic name has a NUL byte"))?;
        unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(1);
            let tp = rd::rd_kafka_topic_partition_list_add(list, name.as_ptr(), partition);
            (*tp).offset = offset;
            Ok(Raw(list))
        }
    }
}

#[pymethods]
impl Consumer {
    /// A consumer from librdkafka settings (all values strings). ValueError quoting
    /// librdkafka when a setting is refused (the caller redacts secrets).
    #[new]
    fn new(py: Python<'_>, settings: Vec<(String, String)>) -> PyResult<Self> {
        let mut errstr = vec![0 as c_char; 512];
        unsafe {
            let conf = rd::rd_kafka_conf_new();
            for (name, value) in &settings {
                let (Ok(k), Ok(v)) = (CString::new(name.as_str()), CString::new(value.as_str())) else {
                    rd::rd_kafka_conf_destroy(conf);
                    return Err(PyValueError::new_err(format!("setting {name:?} has a NUL byte")));
                };
                let res = rd::rd_kafka_conf_set(conf, k.as_ptr(), v.as_ptr(), errstr.as_mut_ptr(), errstr.len());
                if res != rd::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK {
                    rd::rd_kafka_conf_destroy(conf);
                    let text = CStr::from_ptr(errstr.as_ptr()).to_string_lossy().into_owned();
                    return Err(PyValueError::new_err(text));
                }
            }
            let errors: *mut ErrorSink = Box::into_raw(Box::new(Mutex::new(Vec::new())));
            rd::rd_kafka_conf_set_opaque(conf, errors as *mut c_void);
            rd::rd_kafka_conf_set_error_cb(conf, Some(error_cb));
            let conf_raw = Raw(conf);
            let err_raw = Raw(errstr.as_mut_ptr());
            let len = errstr.len();
            let rk = py.allow_threads(move || {
                let (c, e) = (conf_raw, err_raw);
                Raw(rd::rd_kafka_new(rd::rd_kafka_type_t::RD_KAFKA_CONSUMER, c.0, e.0, len))
            });
            if rk.0.is_null() {
                // rd_kafka_new failed: the configuration is still ours.
                rd::rd_kafka_conf_destroy(conf);
                drop(Box::from_raw(errors));
                let text = CStr::from_ptr(errstr.as_ptr()).to_string_lossy().into_owned();
                return Err(PyValueError::new_err(text));
            }
            rd::rd_kafka_poll_set_consumer(rk.0);
            let queue = rd::rd_kafka_queue_get_consumer(rk.0);
            Ok(Consumer { rk: rk.0, queue, errors })
        }
    }

    /// Assigns the one partition at `offset`; returns librdkafka's error code (0: none).
    fn assign(&mut self, py: Python<'_>, topic: &str, partition: i32, offset: i64) -> PyResult<i32> {
        let rk = Raw(self.handle()?);
        let list = Self::partition_list(topic, partition, offset)?;
        Ok(py.allow_threads(move || unsafe {
            let (rk, list) = (rk, list);
            let err = rd::rd_kafka_assign(rk.0, list.0);
            rd::rd_kafka_topic_partition_list_destroy(list.0);
            err as i32
        }))
    }

    /// Drops the assignment (librdkafka stops fetching: an idle pooled consumer asks the
    /// broker nothing); returns librdkafka's error code (0: none).
    fn unassign(&mut self, py: Python<'_>) -> PyResult<i32> {
        let rk = Raw(self.handle()?);
        Ok(py.allow_threads(move || unsafe {
            let rk = rk;
            rd::rd_kafka_assign(rk.0, ptr::null_mut()) as i32
        }))
    }

    /// Partitions assigned now (0 after `unassign`).
    fn assigned_count(&mut self) -> PyResult<i32> {
        let rk = self.handle()?;
        let mut list: *mut rd::rd_kafka_topic_partition_list_t = ptr::null_mut();
        unsafe {
            let err = rd::rd_kafka_assignment(rk, &mut list);
            if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || list.is_null() {
                return Err(PyRuntimeError::new_err(format!("assignment failed ({})", err_name(err as i32))));
            }
            let n = (*list).cnt;
            rd::rd_kafka_topic_partition_list_destroy(list);
            Ok(n)
        }
    }

    /// (error code, low, high) of the partition as the last fetch response told them (no
    /// request; -1001 when not known yet).
    fn cached_watermarks(&mut self, topic: &str, partition: i32) -> PyResult<(i32, i64, i64)> {
        let rk = self.handle()?;
        let name = CString::new(topic).map_err(|_| PyValueError::new_err("topic name has a NUL byte"))?;
        let (mut low, mut high) = (-1001i64, -1001i64);
        let err = unsafe { rd::rd_kafka_get_watermark_offsets(rk, name.as_ptr(), partition, &mut low, &mut high) };
        Ok((err as i32, low, high))
    }

    /// (error code, low, high) of the partition, asked from the broker.
    fn watermarks(&mut self, py: Python<'_>, topic: &str, partition: i32, timeout_ms: i32) -> PyResult<(i32, String, i64, i64)> {
        let rk = Raw(self.handle()?);
        let name = CString::new(topic).map_err(|_| PyValueError::new_err("topic name has a NUL byte"))?;
        Ok(py.allow_threads(move || unsafe {
            let rk = rk;
            let (mut low, mut high) = (-1i64, -1i64);
            let err = rd::rd_kafka_query_watermark_offsets(rk.0, name.as_ptr(), partition, &mut low, &mut high, timeout_ms);
            let text = CStr::from_ptr(rd::rd_kafka_err2str(err)).to_string_lossy().into_owned();
            (err as i32, text, low, high)
        }))
    }

    /// (error code, fetch position) of the partition: the offset the next fetch starts at.
    fn position(&mut self, topic: &str, partition: i32) -> PyResult<(i32, i64)> {
        let rk = self.handle()?;
        let list = Self::partition_list(topic, partition, -1001)?;
        unsafe {
            let err = rd::rd_kafka_position(rk, list.0);
            let offset = (*(*list.0).elems).offset;
            rd::rd_kafka_topic_partition_list_destroy(list.0);
            Ok((err as i32, offset))
        }
    }

    /// Errors librdkafka reported through `error_cb` since the last call: [(code, reason)].
    fn take_errors(&mut self) -> Vec<(i32, String)> {
        if self.errors.is_null() {
            return Vec::new();
        }
        let sink = unsafe { &*self.errors };
        sink.lock().map(|mut e| std::mem::take(&mut *e)).unwrap_or_default()
    }

    /// Consumes up to `max_records` within `timeout_ms` and lays out the records before `end`.
    /// Returns (total records, kept, first offset, last offset, increasing, first offsets, events
    /// [(code, offset, reason)], buffers) with buffers = (key, value, offsets, timestamps µs,
    /// timestamp types, headers or None); key/value/names/values = (validity or None,
    /// offsets, data, null count); headers = (validity, list offsets, null count, names,
    /// values).
    #[pyo3(signature = (max_records, timeout_ms, end, headers))]
    fn consume<'py>(&mut self, py: Python<'py>, max_records: usize, timeout_ms: i32, end: i64,
                    headers: bool) -> PyResult<Bound<'py, PyTuple>> {
        self.handle()?;
        let queue = Raw(self.queue);
        let f = py
            .allow_threads(move || unsafe {
                let q = queue;
                fetch(q.0, max_records, timeout_ms, end, headers)
            })
            .map_err(PyRuntimeError::new_err)?;
        let events = PyList::empty(py);
        for (code, offset, text) in &f.events {
            events.append((code, offset, text))?;
        }
        let head = PyList::new(py, &f.head)?;
        let hdrs: PyObject = match &f.headers {
            None => py.None(),
            Some(h) => PyTuple::new(
                py,
                [
                    bytes_or_none(py, &h.validity),
                    PyBytes::new(py, as_bytes(&h.offsets)).into_any().unbind(),
                    h.validity.nulls.into_pyobject(py)?.into_any().unbind(),
                    binary_tuple(py, &h.names)?.into_any().unbind(),
                    binary_tuple(py, &h.values)?.into_any().unbind(),
                ],
            )?
            .into_any()
            .unbind(),
        };
        let buffers = PyTuple::new(
            py,
            [
                binary_tuple(py, &f.key)?.into_any().unbind(),
                binary_tuple(py, &f.value)?.into_any().unbind(),
                PyBytes::new(py, as_bytes(&f.offsets)).into_any().unbind(),
                PyBytes::new(py, as_bytes(&f.stamps)).into_any().unbind(),
                PyBytes::new(py, as_bytes(&f.stamp_types)).into_any().unbind(),
                hdrs,
            ],
        )?;
        PyTuple::new(
            py,
            [
                f.total.into_pyobject(py)?.into_any().unbind(),
                f.kept.into_pyobject(py)?.into_any().unbind(),
                f.first.into_pyobject(py)?.into_any().unbind(),
                f.last.into_pyobject(py)?.into_any().unbind(),
                pyo3::types::PyBool::new(py, f.increasing).to_owned().into_any().unbind(),
                head.into_any().unbind(),
                events.into_any().unbind(),
                buffers.into_any().unbind(),
            ],
        )
    }

    /// Closes the consumer (idempotent); librdkafka's threads end here.
    fn close(&mut self, py: Python<'_>) {
        if self.rk.is_null() {
            return;
        }
        let (rk, queue) = (Raw(self.rk), Raw(self.queue));
        self.rk = ptr::null_mut();
        self.queue = ptr::null_mut();
        py.allow_threads(move || unsafe {
            let (rk, queue) = (rk, queue);
            rd::rd_kafka_consumer_close(rk.0);
            rd::rd_kafka_queue_destroy(queue.0);
            rd::rd_kafka_destroy(rk.0);
        });
        unsafe { drop(Box::from_raw(self.errors)) };
        self.errors = ptr::null_mut();
    }

    fn __repr__(&self) -> String {
        let state = if self.rk.is_null() { "closed" } else { "open" };
        format!("<orderedstream._kafka_native.Consumer {state}>")
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if !self.rk.is_null() {
            unsafe {
                rd::rd_kafka_consumer_close(self.rk);
                rd::rd_kafka_queue_destroy(self.queue);
                rd::rd_kafka_destroy(self.rk);
                drop(Box::from_raw(self.errors));
            }
        }
    }
}

/// librdkafka's name of an error code (e.g. `_PARTITION_EOF`), as confluent-kafka names it.
#[pyfunction]
fn err_name(code: i32) -> String {
    // rd_kafka_err2name takes the enum; an unknown code must not be transmuted into it.
    unsafe {
        let desc_ptr = {
            let mut descs: *const rd::rd_kafka_err_desc = ptr::null();
            let mut count = 0usize;
            rd::rd_kafka_get_err_descs(&mut descs, &mut count);
            std::slice::from_raw_parts(descs, count)
        };
        for d in desc_ptr {
            if d.code as i32 == code && !d.name.is_null() {
                return CStr::from_ptr(d.name).to_string_lossy().into_owned();
            }
        }
    }
    format!("ERR_{code}")
}

/// librdkafka's version string (what the extension was built with).
#[pyfunction]
fn librdkafka_version() -> String {
    unsafe { CStr::from_ptr(rd::rd_kafka_version_str()).to_string_lossy().into_owned() }
}

#[pymodule]
fn _kafka_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Consumer>()?;
    m.add_function(wrap_pyfunction!(librdkafka_version, m)?)?;
    m.add_function(wrap_pyfunction!(err_name, m)?)?;
    Ok(())
}
