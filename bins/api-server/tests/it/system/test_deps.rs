//! `scripts/test-deps.sh`, what `just test` runs first: every outside tool
//! the suite needs is checked, the missing ones installed with apt-get as
//! root, and another user is stopped with the exact command before anything
//! is built. Every lookup is stubbed (a sysroot, a `PATH` of stubs, the user
//! id), so these run the script's real logic without touching the machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A machine as the script sees it: files under `sysroot`, commands in `bin`.
struct Machine {
    dir: tempfile::TempDir,
}

/// The tools, as the script names them.
#[derive(Clone, Copy, PartialEq)]
enum Tool {
    Chromium,
    Font,
    Promtool,
    PrometheusClient,
    Openssl,
    Postgres,
}

const EVERY_TOOL: [Tool; 6] = [
    Tool::Chromium,
    Tool::Font,
    Tool::Promtool,
    Tool::PrometheusClient,
    Tool::Openssl,
    Tool::Postgres,
];

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

impl Machine {
    /// A machine with these tools, an `apt-get` that records its calls and
    /// installs what the packages named bring when `apt_installs` is true.
    fn with(tools: &[Tool], apt_installs: bool) -> Machine {
        let machine = Machine {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        // What the script runs besides the tools it looks for.
        std::fs::create_dir_all(machine.bin()).expect("mkdir");
        for tool in ["mktemp", "rm", "cat"] {
            let real = ["/usr/bin", "/bin"]
                .iter()
                .map(|d| Path::new(d).join(tool))
                .find(|p| p.is_file())
                .unwrap_or_else(|| panic!("{tool} on this machine"));
            std::os::unix::fs::symlink(real, machine.bin().join(tool)).expect("symlink");
        }
        // Debian's python3, which imports prometheus_client once it is installed.
        script(
            &machine.sysroot().join("usr/bin/python3"),
            &format!(
                "[ -f {} ]",
                machine.sysroot().join("prometheus_client").display()
            ),
        );
        for tool in tools {
            machine.install(*tool);
        }
        let record = machine.dir.path().join("apt-calls");
        let installs = if apt_installs {
            format!(
                "for p in \"$@\"; do case \"$p\" in\n\
                 chromium) : > {chromium}; /bin/chmod +x {chromium};;\n\
                 prometheus) printf '#!/bin/sh\\n' > {promtool}; /bin/chmod +x {promtool};;\n\
                 python3-prometheus-client) : > {client};;\n\
                 esac; done",
                chromium = machine.sysroot().join("usr/bin/chromium").display(),
                promtool = machine.bin().join("promtool").display(),
                client = machine.sysroot().join("prometheus_client").display(),
            )
        } else {
            String::new()
        };
        script(
            &machine.bin().join("apt-get"),
            &format!(
                "echo \"$*\" >> {record}\n[ \"$1\" = install ] || exit 0\n{installs}",
                record = record.display()
            ),
        );
        machine
    }

    fn sysroot(&self) -> PathBuf {
        self.dir.path().join("sysroot")
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn install(&self, tool: Tool) {
        let (root, bin) = (self.sysroot(), self.bin());
        match tool {
            Tool::Chromium => script(&root.join("usr/bin/chromium"), ""),
            Tool::Font => {
                let font = root.join("usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
                std::fs::create_dir_all(font.parent().expect("dir")).expect("mkdir");
                std::fs::write(font, "").expect("font");
            }
            Tool::Promtool => script(&bin.join("promtool"), ""),
            Tool::PrometheusClient => {
                std::fs::write(root.join("prometheus_client"), "").expect("module")
            }
            Tool::Openssl => script(&bin.join("openssl"), ""),
            Tool::Postgres => {
                for name in ["initdb", "pg_ctl"] {
                    script(&root.join("usr/lib/postgresql/15/bin").join(name), "");
                }
            }
        }
    }

    /// The script run as user `uid`, with nothing of this machine's `PATH`.
    fn run(&self, uid: u32, args: &[&str]) -> Output {
        Command::new("/bin/bash")
            .arg(repo().join("scripts/test-deps.sh"))
            .args(args)
            .env_clear()
            .env("PATH", self.bin())
            .env("TEST_DEPS_SYSROOT", self.sysroot())
            .env("TEST_DEPS_UID", uid.to_string())
            .output()
            .expect("bash runs")
    }

    /// Each call apt-get received, its arguments joined.
    fn apt_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("apt-calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn with_every_tool_present_nothing_is_installed() {
    let machine = Machine::with(&EVERY_TOOL, true);
    for uid in [0, 1000] {
        let out = machine.run(uid, &[]);
        assert!(out.status.success(), "uid {uid}: {}", stderr(&out));
    }
    assert!(machine.apt_calls().is_empty(), "{:?}", machine.apt_calls());
}

#[test]
fn another_user_is_stopped_with_the_exact_command_and_nothing_runs() {
    let present: Vec<Tool> = EVERY_TOOL
        .into_iter()
        .filter(|t| ![Tool::Promtool, Tool::PrometheusClient].contains(t))
        .collect();
    let machine = Machine::with(&present, true);
    let out = machine.run(1000, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "sudo apt-get update && sudo apt-get install -y -qq --no-install-recommends \
             prometheus python3 python3-prometheus-client\n"
        ),
        "{err}"
    );
    assert!(err.contains("missing: promtool"), "{err}");
    assert!(err.contains("missing: Python's prometheus_client"), "{err}");
    assert!(!err.contains("missing: Chromium"), "{err}");
    assert!(machine.apt_calls().is_empty(), "{:?}", machine.apt_calls());
}

#[test]
fn root_gets_the_missing_packages_installed_and_checked_again() {
    let present: Vec<Tool> = EVERY_TOOL
        .into_iter()
        .filter(|t| ![Tool::Chromium, Tool::PrometheusClient, Tool::Promtool].contains(t))
        .collect();
    let machine = Machine::with(&present, true);
    let out = machine.run(0, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        machine.apt_calls(),
        [
            "update -qq",
            "install -y -qq --no-install-recommends chromium prometheus python3 \
             python3-prometheus-client"
        ]
    );
    // A second run finds everything and installs nothing more.
    let again = machine.run(0, &[]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(machine.apt_calls().len(), 2);
}

#[test]
fn a_package_that_does_not_bring_its_tool_fails_the_run() {
    let present: Vec<Tool> = EVERY_TOOL
        .into_iter()
        .filter(|t| *t != Tool::Openssl)
        .collect();
    let machine = Machine::with(&present, false);
    let out = machine.run(0, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("still missing after apt-get: openssl"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_only_reports_without_installing_even_as_root() {
    let machine = Machine::with(&[], true);
    let out = machine.run(0, &["--check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core \
             prometheus python3 python3-prometheus-client openssl postgresql"
        ),
        "{err}"
    );
    assert!(machine.apt_calls().is_empty(), "{:?}", machine.apt_calls());
}

/// `just test` runs the script before it builds or starts anything.
#[test]
fn just_test_sets_up_its_tools_before_anything_else() {
    let justfile = std::fs::read_to_string(repo().join("justfile")).expect("justfile");
    let recipe: Vec<&str> = justfile
        .split("\ntest:\n")
        .nth(1)
        .expect("a test recipe")
        .lines()
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let first_command = recipe
        .iter()
        .find(|l| !l.starts_with("#!") && !l.starts_with("set "))
        .expect("a command");
    assert_eq!(*first_command, "scripts/test-deps.sh", "{recipe:?}");
}
