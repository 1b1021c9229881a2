//! Whether the machine was quiet while the bench ran: the CPU others used.
//!
//! Two readings. Before anything starts, the whole machine's busy CPU over
//! two seconds (`/proc/stat`): anything above a tenth of a core is someone
//! else's. During the run, every second, the CPU time of every process that
//! is neither this bench, nor one it started (the api-server, the worker,
//! `pgbench`), nor PostgreSQL: others' builds and benchmarks, which take
//! cores the figures need.

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
    let read = || -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
        Some((cpu.iter().sum(), idle))
    };
    let Some((total0, idle0)) = read() else {
        return 0.0;
    };
    std::thread::sleep(window);
    let Some((total1, idle1)) = read() else {
        return 0.0;
    };
    let busy = (total1 - total0).saturating_sub(idle1 - idle0) as f64;
    busy / TICKS / window.as_secs_f64()
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
