//! One look, against a scripted provider: each test lists the calls the
//! provider expects, in order, with its answers, and checks what the look
//! decided. A call out of the script fails the test, so every test also
//! proves which calls a look makes (and that it makes no other).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use grants_core::vm::{StepFailure, StepKind, VmStatus};
use providers::{
    InstanceProvider, OperationStatus, ProviderError, ProviderFuture, Throttle, Vm, VmOperation,
    VmSpec,
};
use storage::ops::vms::Outcome;

use super::{Answer, Call, Facts, Next, Round, Target, decide, look};

const INSTANCE: &str = "inst_01";
const INSTALLATION: &str = "inst-a";

/// A call the provider gets, as the script names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Create,
    Stop,
    Start,
    Delete,
    GetOperation,
    GetVm,
}

enum Reply {
    Op(Result<VmOperation, ProviderError>),
    Vm(Result<Option<Vm>, ProviderError>),
}

/// Answers each call with the next entry of its script.
struct Scripted {
    script: Mutex<VecDeque<(Method, Reply)>>,
}

impl Scripted {
    fn new(script: Vec<(Method, Reply)>) -> Scripted {
        Scripted {
            script: Mutex::new(script.into()),
        }
    }

    fn next(&self, method: Method) -> Reply {
        let mut script = self
            .script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match script.pop_front() {
            Some((expected, reply)) if expected == method => reply,
            Some((expected, _)) => panic!("called {method:?}, the script expected {expected:?}"),
            None => panic!("called {method:?} after the script ended"),
        }
    }

    fn op(&self, method: Method) -> ProviderFuture<'_, VmOperation> {
        let reply = match self.next(method) {
            Reply::Op(r) => r,
            Reply::Vm(_) => panic!("{method:?} scripted with a VM"),
        };
        Box::pin(async move { reply })
    }

    fn left(&self) -> usize {
        self.script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

impl InstanceProvider for Scripted {
    fn create_vm<'a>(&'a self, spec: &'a VmSpec, _: &'a str) -> ProviderFuture<'a, VmOperation> {
        assert_eq!(spec.name, "bc-01");
        self.op(Method::Create)
    }
    fn stop_vm<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a str,
    ) -> ProviderFuture<'a, VmOperation> {
        self.op(Method::Stop)
    }
    fn start_vm<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a str,
    ) -> ProviderFuture<'a, VmOperation> {
        self.op(Method::Start)
    }
    fn delete_vm<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a str,
    ) -> ProviderFuture<'a, VmOperation> {
        self.op(Method::Delete)
    }
    fn get_operation<'a>(&'a self, _: &'a str, _: &'a str) -> ProviderFuture<'a, VmOperation> {
        self.op(Method::GetOperation)
    }
    fn get_vm<'a>(&'a self, _: &'a str, _: &'a str) -> ProviderFuture<'a, Option<Vm>> {
        let reply = match self.next(Method::GetVm) {
            Reply::Vm(r) => r,
            Reply::Op(_) => panic!("get_vm scripted with an operation"),
        };
        Box::pin(async move { reply })
    }
    fn list_installation_vms<'a>(&'a self, _: &'a str) -> ProviderFuture<'a, Vec<Vm>> {
        panic!("a look never lists")
    }
}

const ZONES: [&str; 2] = ["us-central1-a", "us-central1-b"];

fn facts(kind: StepKind, zones: &[String]) -> Facts<'_> {
    Facts {
        kind,
        instance_id: INSTANCE,
        installation: INSTALLATION,
        on_demand: true,
        zones,
        zone_index: 0,
    }
}

fn spec() -> VmSpec {
    VmSpec {
        name: "bc-01".into(),
        zone: ZONES[0].into(),
        machine_type: "n2-standard-4".into(),
        labels: BTreeMap::new(),
        reservation: None,
        image: "projects/debian-cloud/global/images/family/debian-12".into(),
        disk_gb: 10,
        network: "global/networks/default".into(),
        subnetwork: None,
        service_account: None,
    }
}

fn operation(status: OperationStatus, errors: &[&str]) -> VmOperation {
    VmOperation {
        name: "operation-1".into(),
        zone: ZONES[0].into(),
        status,
        error_codes: errors.iter().map(|e| (*e).to_owned()).collect(),
        error_messages: vec!["for the log only".into()],
    }
}

fn running_op() -> Reply {
    Reply::Op(Ok(operation(OperationStatus::Running, &[])))
}

fn done_op(errors: &[&str]) -> Reply {
    Reply::Op(Ok(operation(OperationStatus::Done, errors)))
}

/// A VM in `status`, labelled for `instance` of `installation`.
fn vm(status: VmStatus, instance: &str, installation: &str) -> Reply {
    let labels = BTreeMap::from([
        (providers::INSTANCE_LABEL.to_owned(), instance.to_owned()),
        (
            providers::INSTALLATION_LABEL.to_owned(),
            installation.to_owned(),
        ),
    ]);
    Reply::Vm(Ok(Some(Vm {
        name: "bc-01".into(),
        zone: ZONES[0].into(),
        status,
        labels,
    })))
}

fn ours(status: VmStatus) -> Reply {
    vm(status, INSTANCE, INSTALLATION)
}

/// Runs one look of a `kind` step (with `operation`, if it has one) against
/// `script`, and checks the script was used up.
fn run(kind: StepKind, operation: Option<&str>, script: Vec<(Method, Reply)>) -> Round {
    let zones: Vec<String> = ZONES.iter().map(|z| (*z).to_owned()).collect();
    let provider = Scripted::new(script);
    let spec = spec();
    let target = Target {
        name: "bc-01",
        zone: ZONES[0],
        request_id: "3f1c2d4e-0000-4000-8000-000000000001",
        operation,
        spec: Some(&spec),
    };
    let round = futures::executor::block_on(look(&provider, &facts(kind, &zones), &target));
    assert_eq!(provider.left(), 0, "the look skipped calls of its script");
    round
}

fn failure(round: &Round) -> Option<&StepFailure> {
    match round {
        Round::End(Outcome::Failed { failure }) => Some(failure),
        _ => None,
    }
}

fn confirmed(round: &Round) -> Option<Option<&VmStatus>> {
    match round {
        Round::End(Outcome::Confirmed { vm_status }) => Some(vm_status.as_ref()),
        _ => None,
    }
}

#[test]
fn a_send_keeps_the_operation_the_provider_answered() {
    let round = run(StepKind::Create, None, vec![(Method::Create, running_op())]);
    assert!(
        matches!(round, Round::Operation(ref op) if op == "operation-1"),
        "{round:?}"
    );
}

#[test]
fn a_done_operation_is_confirmed_by_reading_the_vm_in_the_status_aimed_at() {
    for (kind, status) in [
        (StepKind::Create, VmStatus::Running),
        (StepKind::Start, VmStatus::Running),
        (StepKind::Stop, VmStatus::Terminated),
        (StepKind::Stop, VmStatus::Suspended),
    ] {
        let script = vec![
            (Method::GetOperation, done_op(&[])),
            (Method::GetVm, ours(status.clone())),
        ];
        let round = run(kind, Some("operation-1"), script);
        assert_eq!(
            confirmed(&round),
            Some(Some(&status)),
            "{kind:?}: {round:?}"
        );
    }
}

#[test]
fn a_vm_not_yet_in_the_status_aimed_at_is_read_again() {
    for (kind, status) in [
        (StepKind::Create, VmStatus::Staging),
        (StepKind::Stop, VmStatus::Stopping),
        (StepKind::Start, VmStatus::Terminated),
    ] {
        let script = vec![
            (Method::GetOperation, done_op(&[])),
            (Method::GetVm, ours(status)),
        ];
        let round = run(kind, Some("operation-1"), script);
        assert!(matches!(round, Round::PollVm), "{kind:?}: {round:?}");
    }
}

#[test]
fn an_operation_under_way_is_polled_and_a_lost_one_is_sent_again() {
    let round = run(
        StepKind::Stop,
        Some("operation-1"),
        vec![(Method::GetOperation, running_op())],
    );
    assert!(matches!(round, Round::PollOperation), "{round:?}");
    let lost = Reply::Op(Err(ProviderError::NotFound));
    let round = run(
        StepKind::Stop,
        Some("operation-1"),
        vec![(Method::GetOperation, lost)],
    );
    assert!(matches!(round, Round::Resend), "{round:?}");
}

#[test]
fn an_operations_first_error_code_fails_the_step() {
    let script = vec![(
        Method::GetOperation,
        done_op(&["CONDITION_NOT_MET", "OTHER"]),
    )];
    let round = run(StepKind::Create, Some("operation-1"), script);
    assert_eq!(
        failure(&round),
        Some(&StepFailure::Provider("CONDITION_NOT_MET".into()))
    );
    // An operation done with an error at once (answered to the send).
    let round = run(
        StepKind::Start,
        None,
        vec![(Method::Start, done_op(&["QUOTA_EXCEEDED"]))],
    );
    assert_eq!(
        failure(&round).map(StepFailure::code),
        Some("QUOTA_EXCEEDED")
    );
}

#[test]
fn an_exhausted_zone_moves_an_on_demand_create_to_the_next_zone_until_none_is_left() {
    let script = vec![(
        Method::GetOperation,
        done_op(&["ZONE_RESOURCE_POOL_EXHAUSTED"]),
    )];
    let round = run(StepKind::Create, Some("operation-1"), script);
    assert!(
        matches!(round, Round::NextZone(ref z, 1) if z == ZONES[1]),
        "{round:?}"
    );
    // In the last zone, or aimed at a reservation, it fails.
    let zones: Vec<String> = ZONES.iter().map(|z| (*z).to_owned()).collect();
    let exhausted = || {
        Answer::Operation(Ok(operation(
            OperationStatus::Done,
            &["ZONE_RESOURCE_POOL_EXHAUSTED"],
        )))
    };
    let last = Facts {
        zone_index: 1,
        ..facts(StepKind::Create, &zones)
    };
    let reserved = Facts {
        on_demand: false,
        ..facts(StepKind::Create, &zones)
    };
    for f in [last, reserved] {
        let Next::Round(round) = decide(&f, exhausted()) else {
            panic!("no further call after a failed operation");
        };
        assert_eq!(
            failure(&round).map(StepFailure::code),
            Some("ZONE_RESOURCE_POOL_EXHAUSTED")
        );
    }
}

#[test]
fn a_create_found_existing_is_adopted_only_when_it_is_this_installations_instance() {
    let exists = || Reply::Op(Err(ProviderError::AlreadyExists));
    let round = run(
        StepKind::Create,
        None,
        vec![
            (Method::Create, exists()),
            (Method::GetVm, ours(VmStatus::Running)),
        ],
    );
    assert_eq!(
        confirmed(&round),
        Some(Some(&VmStatus::Running)),
        "{round:?}"
    );
    for owner in [
        vm(VmStatus::Running, "inst_other", INSTALLATION),
        vm(VmStatus::Running, INSTANCE, "another-installation"),
    ] {
        let round = run(
            StepKind::Create,
            None,
            vec![(Method::Create, exists()), (Method::GetVm, owner)],
        );
        assert_eq!(failure(&round), Some(&StepFailure::NameTaken), "{round:?}");
    }
    // Ours but still starting: read again.
    let round = run(
        StepKind::Create,
        None,
        vec![
            (Method::Create, exists()),
            (Method::GetVm, ours(VmStatus::Staging)),
        ],
    );
    assert!(matches!(round, Round::PollVm), "{round:?}");
}

#[test]
fn a_read_back_vm_of_another_owner_fails_the_create_with_name_taken() {
    let script = vec![
        (Method::GetOperation, done_op(&[])),
        (
            Method::GetVm,
            vm(VmStatus::Running, "inst_other", INSTALLATION),
        ),
    ];
    let round = run(StepKind::Create, Some("operation-1"), script);
    assert_eq!(failure(&round), Some(&StepFailure::NameTaken));
}

#[test]
fn a_404_to_a_send_fails_a_create_loses_a_stop_or_start_and_confirms_a_delete_by_a_read() {
    let missing = || Reply::Op(Err(ProviderError::NotFound));
    let round = run(StepKind::Create, None, vec![(Method::Create, missing())]);
    assert_eq!(failure(&round).map(StepFailure::code), Some("notFound"));
    for (kind, method) in [
        (StepKind::Stop, Method::Stop),
        (StepKind::Start, Method::Start),
    ] {
        let round = run(kind, None, vec![(method, missing())]);
        assert_eq!(failure(&round), Some(&StepFailure::Vanished), "{kind:?}");
    }
    let round = run(
        StepKind::Delete,
        None,
        vec![
            (Method::Delete, missing()),
            (Method::GetVm, Reply::Vm(Ok(None))),
        ],
    );
    assert_eq!(confirmed(&round), Some(None));
}

#[test]
fn a_vm_gone_after_its_operation_is_lost_confirms_a_delete_and_is_waited_for_after_a_create() {
    let gone = || Reply::Vm(Ok(None));
    let run_gone = |kind| {
        run(
            kind,
            Some("operation-1"),
            vec![
                (Method::GetOperation, done_op(&[])),
                (Method::GetVm, gone()),
            ],
        )
    };
    assert_eq!(confirmed(&run_gone(StepKind::Delete)), Some(None));
    assert!(matches!(run_gone(StepKind::Create), Round::PollVm));
    assert_eq!(
        failure(&run_gone(StepKind::Stop)),
        Some(&StepFailure::Vanished)
    );
    assert_eq!(
        failure(&run_gone(StepKind::Start)),
        Some(&StepFailure::Vanished)
    );
    // A VM still there after its delete's operation: not done yet.
    let round = run(
        StepKind::Delete,
        Some("operation-1"),
        vec![
            (Method::GetOperation, done_op(&[])),
            (Method::GetVm, ours(VmStatus::Deprovisioning)),
        ],
    );
    assert!(matches!(round, Round::PollVm), "{round:?}");
}

#[test]
fn a_quota_refusal_is_throttled_a_transient_error_retried_a_final_one_failed_with_its_reason() {
    let throttled = ProviderError::Throttled {
        quota: Throttle::Rate,
        retry_after: None,
    };
    let round = run(
        StepKind::Create,
        None,
        vec![(Method::Create, Reply::Op(Err(throttled)))],
    );
    assert!(
        matches!(round, Round::Throttled(Throttle::Rate, None)),
        "{round:?}"
    );
    for transient in [
        ProviderError::Status { status: 503 },
        ProviderError::Timeout,
        ProviderError::Rejected {
            status: 400,
            reason: "resourceNotReady".into(),
        },
    ] {
        let round = run(
            StepKind::Stop,
            None,
            vec![(Method::Stop, Reply::Op(Err(transient)))],
        );
        assert!(matches!(round, Round::Retry(_)), "{round:?}");
    }
    let refused = ProviderError::Rejected {
        status: 403,
        reason: "insufficientPermissions".into(),
    };
    let round = run(
        StepKind::Create,
        Some("operation-1"),
        vec![(Method::GetOperation, Reply::Op(Err(refused)))],
    );
    assert_eq!(
        failure(&round).map(StepFailure::code),
        Some("insufficientPermissions")
    );
    let malformed = ProviderError::Malformed("not json".into());
    let round = run(
        StepKind::Create,
        Some("operation-1"),
        vec![
            (Method::GetOperation, done_op(&[])),
            (Method::GetVm, Reply::Vm(Err(malformed))),
        ],
    );
    assert_eq!(failure(&round), Some(&StepFailure::ProviderError));
}

#[test]
fn a_create_without_vm_settings_fails_without_calling_the_provider() {
    let zones: Vec<String> = ZONES.iter().map(|z| (*z).to_owned()).collect();
    let provider = Scripted::new(vec![]);
    let target = Target {
        name: "bc-01",
        zone: ZONES[0],
        request_id: "3f1c2d4e-0000-4000-8000-000000000001",
        operation: None,
        spec: None,
    };
    let round =
        futures::executor::block_on(look(&provider, &facts(StepKind::Create, &zones), &target));
    assert_eq!(failure(&round), Some(&StepFailure::ProviderError));
}

/// Every answer leads to at most one more call, and a call made after the
/// first is a read of the VM, whose answer ends the look: a look makes two
/// calls at most whatever the provider answers.
#[test]
fn a_look_makes_two_calls_at_most() {
    let zones: Vec<String> = ZONES.iter().map(|z| (*z).to_owned()).collect();
    let errors = || {
        vec![
            ProviderError::NotFound,
            ProviderError::AlreadyExists,
            ProviderError::Timeout,
            ProviderError::Status { status: 500 },
            ProviderError::Malformed("x".into()),
            ProviderError::Throttled {
                quota: Throttle::ConcurrentOperations,
                retry_after: None,
            },
        ]
    };
    for kind in [
        StepKind::Create,
        StepKind::Stop,
        StepKind::Start,
        StepKind::Delete,
    ] {
        let f = facts(kind, &zones);
        let mut answers: Vec<(Call, Answer)> = Vec::new();
        for e in errors() {
            answers.push((Call::Send, Answer::Sent(Err(e))));
        }
        for e in errors() {
            answers.push((Call::ReadOperation, Answer::Operation(Err(e))));
        }
        for status in [OperationStatus::Running, OperationStatus::Done] {
            for errs in [&[][..], &["CONDITION_NOT_MET"][..]] {
                let op = || operation(status, errs);
                answers.push((Call::Send, Answer::Sent(Ok(op()))));
                answers.push((Call::ReadOperation, Answer::Operation(Ok(op()))));
            }
        }
        for (call, answer) in answers {
            if let Next::Call(next) = decide(&f, answer) {
                assert!(
                    matches!(next, Call::ReadBack | Call::Adopt),
                    "{kind:?} {call:?} led to {next:?}"
                );
            }
        }
        for e in errors() {
            for answer in [Answer::ReadBack(Err(e.clone())), Answer::Adopt(Err(e))] {
                assert!(matches!(decide(&f, answer), Next::Round(_)));
            }
        }
        for status in [VmStatus::Running, VmStatus::Terminated, VmStatus::Staging] {
            let reply = |s: VmStatus| match ours(s) {
                Reply::Vm(r) => r,
                Reply::Op(_) => unreachable!("ours is a VM"),
            };
            for answer in [
                Answer::ReadBack(reply(status.clone())),
                Answer::Adopt(reply(status.clone())),
                Answer::ReadBack(Ok(None)),
                Answer::Adopt(Ok(None)),
            ] {
                assert!(matches!(decide(&f, answer), Next::Round(_)));
            }
        }
    }
}
