//! Whether the machine was quiet while the bench ran: the CPU others used.
//!
//! Two readings. Before anything starts, the whole machine's busy CPU over
//! two seconds (`/proc/stat`): anything above a tenth of a core is someone
//! else's. During the run, every second, the CPU time of every process that
//! is neither this bench, nor one it started (the api-server, the worker,
//! `pgbench`), nor PostgreSQL: others' builds and benchmarks, which take
//! cores the figures need.
//!
//! And per timed run ([`CpuSpan`]): the whole machine's busy cores and each
//! part's share (PostgreSQL, the api-server, the worker, the bench with its
//! fake GCE), which says whether a figure was held back by its CPU or by a
//! lock (a run on two cores that leaves a core idle waited on something).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc` CPU times (`getconf CLK_TCK`; 100 on
/// Linux for every architecture this runs on).
const TICKS: f64 = 100.0;

/// Above this many cores used by others, on average, a run is busy.
pub const BUSY_CORES: f64 = 0.2;

/// The machine's busy cores over `window`, from `/proc/stat`'s first line.
pub fn busy_cores(window: Duration) -> f64 {
    let before = machine_ticks();
    std::thread::sleep(window);
    machine_ticks().saturating_sub(before) as f64 / TICKS / window.as_secs_f64()
}

/// One process as `/proc/PID/stat` gives it.
struct Proc {
    ppid: u32,
    comm: String,
    ticks: u64,
}

fn processes() -> HashMap<u32, Proc> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces; it ends at the
        // last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        // After comm: state(0) ppid(1) ... utime(11) stime(12).
        out.insert(
            pid,
            Proc {
                ppid: u32::try_from(field(1)).unwrap_or(0),
                comm,
                ticks: field(11) + field(12),
            },
        );
    }
    out
}

/// The pids that are this process or descend from it.
fn ours(procs: &HashMap<u32, Proc>) -> HashSet<u32> {
    let me = std::process::id();
    let mut set = HashSet::from([me]);
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, p) in procs {
            if !set.contains(pid) && set.contains(&p.ppid) {
                set.insert(*pid);
                grew = true;
            }
        }
    }
    set
}

/// Samples others' CPU every second in a thread until stopped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<f64>>>,
    thread: Option<JoinHandle<()>>,
}

/// What others used during the run, in cores.
#[derive(Debug, Clone, Copy, Default)]
pub struct Others {
    /// The whole machine's busy cores over two seconds before the run.
    pub at_start: f64,
    /// Others' mean over the run.
    pub mean: f64,
    /// Others' busiest second.
    pub max: f64,
}

impl Others {
    /// Whether others took enough CPU to make the figures low.
    pub fn busy(&self) -> bool {
        self.at_start > BUSY_CORES || self.mean > BUSY_CORES
    }
}

impl Watcher {
    /// Starts sampling.
    pub fn start() -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, samples) = (stop.clone(), samples.clone());
            std::thread::spawn(move || {
                let foreign = |procs: &HashMap<u32, Proc>| -> HashMap<u32, u64> {
                    let ours = ours(procs);
                    procs
                        .iter()
                        .filter(|(pid, p)| !ours.contains(pid) && !p.comm.starts_with("postgres"))
                        .map(|(pid, p)| (*pid, p.ticks))
                        .collect()
                };
                let mut last = (Instant::now(), foreign(&processes()));
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                    let now = (Instant::now(), foreign(&processes()));
                    let ticks: u64 = now
                        .1
                        .iter()
                        .map(|(pid, t)| t.saturating_sub(last.1.get(pid).copied().unwrap_or(0)))
                        .sum();
                    let secs = now.0.duration_since(last.0).as_secs_f64().max(1e-3);
                    if let Ok(mut s) = samples.lock() {
                        s.push(ticks as f64 / TICKS / secs);
                    }
                    last = now;
                }
            })
        };
        Watcher {
            stop,
            samples,
            thread: Some(thread),
        }
    }

    /// Stops sampling; what others used, with `at_start`.
    pub fn finish(mut self, at_start: f64) -> Others {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let s = self.samples.lock().map(|s| s.clone()).unwrap_or_default();
        let mean = if s.is_empty() {
            0.0
        } else {
            s.iter().sum::<f64>() / s.len() as f64
        };
        Others {
            at_start,
            mean,
            max: s.iter().copied().fold(0.0, f64::max),
        }
    }
}

/// The part of the system a process belongs to, for [`CpuUse`].
fn part_of(pid: u32, p: &Proc) -> &'static str {
    if pid == std::process::id() {
        "bench"
    } else if p.comm.starts_with("postgres") {
        "PostgreSQL"
    } else if p.comm == "api-server" {
        "api-server"
    } else if p.comm.starts_with("reconciler-wor") {
        "worker"
    } else if p.comm == "pgbench" {
        "pgbench"
    } else {
        "other"
    }
}

/// The machine's busy ticks so far (`/proc/stat`'s first line, all but
/// idle and iowait).
fn machine_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    cpu.iter().sum::<u64>().saturating_sub(idle)
}

/// The CPU one timed run used.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuUse {
    /// The run's wall time.
    pub wall: Duration,
    /// The whole machine's busy cores, on average.
    pub machine: f64,
    /// The cores each part used, on average, largest first (processes that
    /// ended during the run are in `machine` only).
    pub parts: Vec<(&'static str, f64)>,
}

impl CpuUse {
    /// CPU time per operation for `ops` operations, in milliseconds.
    pub fn ms_per_op(&self, ops: u64) -> f64 {
        self.machine * self.wall.as_secs_f64() * 1e3 / (ops.max(1) as f64)
    }

    /// `1.93 cores: PostgreSQL 1.10, api-server 0.52, bench 0.28`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .parts
            .iter()
            .filter(|(_, c)| *c >= 0.005)
            .map(|(p, c)| format!("{p} {c:.2}"))
            .collect();
        format!("{:.2} cores: {}", self.machine, parts.join(", "))
    }
}

/// The start of a timed run's CPU reading.
pub struct CpuSpan {
    at: Instant,
    machine: u64,
    procs: HashMap<u32, (&'static str, u64)>,
}

fn by_part() -> HashMap<u32, (&'static str, u64)> {
    processes()
        .into_iter()
        .map(|(pid, p)| (pid, (part_of(pid, &p), p.ticks)))
        .collect()
}

impl CpuSpan {
    /// Reads the machine and every process now.
    pub fn start() -> CpuSpan {
        CpuSpan {
            at: Instant::now(),
            machine: machine_ticks(),
            procs: by_part(),
        }
    }

    /// What was used since [`CpuSpan::start`].
    pub fn finish(self) -> CpuUse {
        let busy = machine_ticks();
        let now = by_part();
        let wall = self.at.elapsed();
        let secs = wall.as_secs_f64().max(1e-3);
        let mut parts: HashMap<&'static str, u64> = HashMap::new();
        for (pid, (part, ticks)) in &now {
            let before = self.procs.get(pid).map_or(0, |(_, t)| *t);
            *parts.entry(part).or_default() += ticks.saturating_sub(before);
        }
        let mut parts: Vec<(&'static str, f64)> = parts
            .into_iter()
            .map(|(p, t)| (p, t as f64 / TICKS / secs))
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        CpuUse {
            wall,
            machine: busy.saturating_sub(self.machine) as f64 / TICKS / secs,
            parts,
        }
    }
}
