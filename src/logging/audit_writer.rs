//! Audit lines reach stdout through a bounded queue and one writer thread, so
//! a reader that stops reading (a full pipe) stalls that thread only, never a
//! decision: when the queue's bytes (those waiting and those being written)
//! would pass [`CAPACITY_BYTES`], the record is dropped and counted
//! (`driftguard_audit_dropped_total`).
//!
//! Queueing a line never makes a system call while lines keep coming: the
//! writer looks at the queue every `POLL` for `STAY_AWAKE` after the last
//! line, and only then sleeps until the next line wakes it. Waking a sleeping
//! thread for every line cost as much as a third of a small review's decision,
//! on the path the apiserver waits on; a line now waits at most `POLL`.

use std::io::Write;
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// Bytes of lines waiting for stdout or being written: about 8,000 typical
/// records. A record lists at most `audit::LISTED_PATH_BYTES` of paths.
pub const CAPACITY_BYTES: usize = 4 * 1024 * 1024;
/// How often an awake writer looks for lines.
pub(crate) const POLL: Duration = Duration::from_millis(1);
/// How long the writer stays awake after its last line.
pub(crate) const STAY_AWAKE: Duration = Duration::from_millis(200);

static QUEUE: OnceLock<Arc<Queue>> = OnceLock::new();
static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Records dropped because the queue was full (or its writer gone).
pub(crate) fn dropped() -> &'static Counter {
    &DROPPED
}

/// Starts the writer thread, writing to `out` (stdout, or a benchmark's
/// sink); later calls do nothing.
pub(crate) fn start_to(out: impl Write + Send + 'static) {
    QUEUE.get_or_init(|| {
        let queue = Arc::new(Queue::default());
        let writer = queue.clone();
        let spawned = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || writer.write_lines(out));
        if let Err(e) = spawned {
            eprintln!("driftguard: cannot start the audit writer: {e}");
            queue.lock().writer_gone = true;
        }
        queue
    });
}

/// Queues one line without waiting; drops and counts it if the queue is full.
pub(crate) fn submit(line: String) {
    match QUEUE.get() {
        Some(queue) => queue.submit(line),
        None => {
            DROPPED.inc();
        }
    }
}

/// Waits at most `within` for the queued lines to be written: at shutdown,
/// so that a live reader gets every record and a stuck one does not hold the
/// exit. Returns whether everything was written.
pub(crate) fn flush(within: Duration) -> bool {
    QUEUE.get().is_none_or(|queue| queue.flush(within))
}

#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    /// The writer waits on it for lines or a flush.
    work: Condvar,
    /// Flushes wait on it for the writer.
    written: Condvar,
}

#[derive(Default)]
struct State {
    lines: Vec<String>,
    /// Of the lines queued and those the writer took and has not written.
    bytes: usize,
    /// The writer sleeps until woken (not polling).
    asleep: bool,
    writer_gone: bool,
    /// Flushes asked for, and the last one the writer answered.
    flushes_asked: u64,
    flushes_done: u64,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data: keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn submit(&self, line: String) {
        let mut state = self.lock();
        let bytes = line.len() + 1;
        if state.writer_gone || state.bytes + bytes > CAPACITY_BYTES {
            drop(state);
            DROPPED.inc();
            return;
        }
        state.bytes += bytes;
        state.lines.push(line);
        if std::mem::take(&mut state.asleep) {
            drop(state);
            self.work.notify_one();
        }
    }

    fn flush(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut state = self.lock();
        if state.writer_gone {
            return state.lines.is_empty();
        }
        state.flushes_asked += 1;
        let ticket = state.flushes_asked;
        state.asleep = false;
        self.work.notify_one();
        while state.flushes_done < ticket {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .written
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Waits for lines or a flush; returns them and the flush to answer.
    fn next_batch(&self, idle_since: Instant) -> (Vec<String>, u64) {
        let mut state = self.lock();
        while state.lines.is_empty() && state.flushes_asked == state.flushes_done {
            state = if idle_since.elapsed() < STAY_AWAKE {
                self.work.wait_timeout(state, POLL)
            } else {
                state.asleep = true;
                self.work.wait_timeout(state, Duration::from_secs(3600))
            }
            .unwrap_or_else(|e| e.into_inner())
            .0;
            state.asleep = false;
        }
        (std::mem::take(&mut state.lines), state.flushes_asked)
    }

    /// The writer thread: each batch written and flushed in one go.
    fn write_lines(&self, out: impl Write) {
        let mut out = std::io::BufWriter::new(out);
        let mut failed = false;
        let mut idle_since = Instant::now();
        loop {
            let (lines, flush) = self.next_batch(idle_since);
            if !lines.is_empty() {
                idle_since = Instant::now();
            }
            let mut result = Ok(());
            for line in &lines {
                result = result.and_then(|()| writeln!(out, "{line}"));
            }
            if let Err(e) = result.and_then(|()| out.flush()) {
                // A closed stdout must not take the server down; say it once.
                if !failed {
                    eprintln!("driftguard: cannot write audit records to stdout: {e}");
                }
                failed = true;
            }
            let written: usize = lines.iter().map(|l| l.len() + 1).sum();
            drop(lines);
            let mut state = self.lock();
            state.bytes -= written;
            state.flushes_done = flush;
            drop(state);
            self.written.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn writer(sink: &Sink) -> Arc<Queue> {
        let queue = Arc::new(Queue::default());
        let (writer, sink) = (queue.clone(), sink.clone());
        std::thread::spawn(move || writer.write_lines(sink));
        queue
    }

    fn written(sink: &Sink) -> String {
        String::from_utf8(sink.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn lines_are_written_in_order_and_a_flush_waits_for_them() {
        let sink = Sink::default();
        let queue = writer(&sink);
        for i in 0..3 {
            queue.submit(format!("r{i}"));
        }
        assert!(queue.flush(Duration::from_secs(5)));
        assert_eq!(written(&sink), "r0\nr1\nr2\n");
    }

    #[test]
    fn a_line_is_written_without_a_flush_whether_the_writer_polls_or_sleeps() {
        let sink = Sink::default();
        let queue = writer(&sink);
        let appears = |want: &str| {
            let since = Instant::now();
            while written(&sink) != want {
                assert!(
                    since.elapsed() < Duration::from_secs(5),
                    "{want:?} never written"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        queue.submit("polling".into());
        appears("polling\n");
        // Past STAY_AWAKE the writer sleeps until the next line wakes it.
        std::thread::sleep(STAY_AWAKE * 2);
        assert!(queue.lock().asleep, "the idle writer still polls");
        queue.submit("asleep".into());
        appears("polling\nasleep\n");
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        // No writer: nothing leaves the queue.
        let queue = Queue::default();
        let before = DROPPED.get();
        let line = "x".repeat(999);
        let fit = CAPACITY_BYTES / 1000;
        for _ in 0..fit + 3 {
            queue.submit(line.clone());
        }
        assert_eq!(queue.lock().lines.len(), fit);
        assert_eq!(queue.lock().bytes, fit * 1000);
        assert!(DROPPED.get() >= before + 3);
        assert!(!queue.flush(Duration::from_millis(20)));
    }
}
