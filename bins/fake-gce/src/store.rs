//! The in-memory reservations and the GCE shapes they are shown in.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::realism::mark_unreachable;

mod persist;

/// The page size when the caller sends no `maxResults` (also GCE's maximum).
pub const MAX_PAGE_SIZE: usize = 500;

pub(crate) const API_ROOT: &str = "https://www.googleapis.com/compute/v1";

/// What a `PUT /fake/...` stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationSpec {
    /// `specificReservation.count`.
    pub count: i64,
    /// `specificReservation.inUseCount`.
    pub in_use_count: i64,
    /// `specificReservation.instanceProperties.machineType`.
    pub machine_type: String,
    /// `status`, e.g. `READY`.
    pub status: String,
}

#[derive(Debug, Clone)]
struct Stored {
    id: u64,
    spec: ReservationSpec,
}

/// `(zone, name)`: the order reservations are listed and paged in.
type Key = (String, String);

#[derive(Debug, Default)]
struct Project {
    reservations: BTreeMap<Key, Stored>,
    /// Every zone that ever held a reservation: GCE lists each zone on every
    /// page, with a `NO_RESULTS_ON_PAGE` warning when it has none there.
    zones: BTreeSet<String>,
}

/// How an injected failure answers (`POST /fake/fail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// The HTTP status, 400 to 599.
    pub status: u16,
    /// The `Retry-After` header in seconds, if any.
    pub retry_after_s: Option<u64>,
}

impl Default for Failure {
    fn default() -> Self {
        Failure {
            status: 503,
            retry_after_s: None,
        }
    }
}

/// All projects' reservations, the failures still to inject, the read
/// calls counted and the delay applied to them.
#[derive(Debug)]
pub struct Store {
    projects: BTreeMap<String, Project>,
    failures_left: u64,
    failure: Failure,
    /// Mutating instance calls still to apply and answer as `failure` says
    /// (`POST /fake/fail-mutations`).
    mutation_failures_left: u64,
    mutation_failure: Failure,
    next_id: u64,
    /// Read calls per project (as named in the request path).
    calls: BTreeMap<String, u64>,
    delay: Duration,
    /// Zones the aggregated lists leave out (`POST /fake/unreachable`).
    unreachable: BTreeSet<String>,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            projects: BTreeMap::new(),
            failures_left: 0,
            failure: Failure::default(),
            mutation_failures_left: 0,
            mutation_failure: Failure::default(),
            next_id: 1_000_000_000_000_000_001,
            calls: BTreeMap::new(),
            delay: Duration::ZERO,
            unreachable: BTreeSet::new(),
        }
    }
}

/// Why a VM cannot take a slot of a specific reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotError {
    /// No such reservation in that project and zone.
    Missing,
    /// Its `inUseCount` has reached its `count`.
    Full,
}

/// Why a page could not be served.
#[derive(Debug, PartialEq, Eq)]
pub enum PageError {
    /// The `pageToken` is not one this fake handed out.
    BadToken,
}

impl Store {
    /// Creates or replaces a reservation; answers it in the GCE shape.
    pub fn put(&mut self, project: &str, zone: &str, name: &str, spec: ReservationSpec) -> Value {
        let p = self.projects.entry(project.to_owned()).or_default();
        p.zones.insert(zone.to_owned());
        let key = (zone.to_owned(), name.to_owned());
        let id = match p.reservations.get(&key) {
            Some(existing) => existing.id,
            None => {
                self.next_id += 1;
                self.next_id
            }
        };
        let stored = Stored { id, spec };
        let shown = reservation_json(project, zone, name, &stored);
        p.reservations.insert(key, stored);
        shown
    }

    /// One reservation in the GCE shape, if it exists.
    pub fn get(&self, project: &str, zone: &str, name: &str) -> Option<Value> {
        let stored = self
            .projects
            .get(project)?
            .reservations
            .get(&(zone.to_owned(), name.to_owned()))?;
        Some(reservation_json(project, zone, name, stored))
    }

    /// Deletes a reservation; answers whether it existed.
    pub fn delete(&mut self, project: &str, zone: &str, name: &str) -> bool {
        self.projects
            .get_mut(project)
            .and_then(|p| p.reservations.remove(&(zone.to_owned(), name.to_owned())))
            .is_some()
    }

    /// The machine type a reservation holds (as stored: a name or a URL).
    pub fn machine_type(&self, project: &str, zone: &str, name: &str) -> Option<&str> {
        self.projects
            .get(project)?
            .reservations
            .get(&(zone.to_owned(), name.to_owned()))
            .map(|stored| stored.spec.machine_type.as_str())
    }

    /// Counts one more VM in a reservation's `inUseCount`, if it has room.
    pub fn take_slot(&mut self, project: &str, zone: &str, name: &str) -> Result<(), SlotError> {
        let stored = self
            .projects
            .get_mut(project)
            .and_then(|p| p.reservations.get_mut(&(zone.to_owned(), name.to_owned())))
            .ok_or(SlotError::Missing)?;
        if stored.spec.in_use_count >= stored.spec.count {
            return Err(SlotError::Full);
        }
        stored.spec.in_use_count += 1;
        Ok(())
    }

    /// Counts one VM less in a reservation's `inUseCount` (if it still exists).
    pub fn free_slot(&mut self, project: &str, zone: &str, name: &str) {
        if let Some(stored) = self
            .projects
            .get_mut(project)
            .and_then(|p| p.reservations.get_mut(&(zone.to_owned(), name.to_owned())))
        {
            stored.spec.in_use_count = (stored.spec.in_use_count - 1).max(0);
        }
    }

    /// Makes the next `count` read calls fail as `failure` says (replacing
    /// any count left).
    pub fn fail_next(&mut self, count: u64, failure: Failure) {
        self.failures_left = count;
        self.failure = failure;
    }

    /// Makes the next `count` mutating instance calls be applied and then
    /// answered as `failure` says (replacing any count left).
    pub fn fail_mutations_next(&mut self, count: u64, failure: Failure) {
        self.mutation_failures_left = count;
        self.mutation_failure = failure;
    }

    /// How this applied mutation's answer must fail, if it must; counts it
    /// down.
    pub fn take_mutation_failure(&mut self) -> Option<Failure> {
        if self.mutation_failures_left > 0 {
            self.mutation_failures_left -= 1;
            Some(self.mutation_failure)
        } else {
            None
        }
    }

    /// How long every call waits before it is answered (`POST /fake/delay`).
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Counts a read call of `project`; answers how long it must wait.
    pub fn count_call(&mut self, project: &str) -> Duration {
        *self.calls.entry(project.to_owned()).or_default() += 1;
        self.delay
    }

    /// Read calls per project since start or the last reset.
    pub fn calls(&self) -> &BTreeMap<String, u64> {
        &self.calls
    }

    /// Forgets the counted calls.
    pub fn reset_calls(&mut self) {
        self.calls.clear();
    }

    /// Sets the delay of every later read call (zero: none).
    pub fn set_delay(&mut self, delay: Duration) {
        self.delay = delay;
    }

    /// The zones the aggregated lists leave out.
    pub fn unreachable(&self) -> &BTreeSet<String> {
        &self.unreachable
    }

    /// Makes the aggregated lists leave `zones` out (none: every zone back).
    pub fn set_unreachable(&mut self, zones: BTreeSet<String>) {
        self.unreachable = zones;
    }

    /// How this read call must fail, if it must; counts it down.
    pub fn take_failure(&mut self) -> Option<Failure> {
        if self.failures_left > 0 {
            self.failures_left -= 1;
            Some(self.failure)
        } else {
            None
        }
    }

    /// One page of `aggregated/reservations` in the GCE shape.
    ///
    /// The token is the `zone.name` key of the last reservation on the
    /// previous page, so a listing stays consistent while reservations are
    /// added or removed between pages. The unreachable zones are left out of
    /// every page, shown as `UNREACHABLE` scopes, or in `unreachables` when
    /// `partial` (`returnPartialSuccess=true`).
    pub fn aggregated_page(
        &self,
        project: &str,
        page_size: usize,
        page_token: Option<&str>,
        partial: bool,
    ) -> Result<Value, PageError> {
        let start = match page_token {
            None => Bound::Unbounded,
            Some(token) => {
                let (zone, name) = token.split_once('.').ok_or(PageError::BadToken)?;
                if zone.is_empty() || name.is_empty() {
                    return Err(PageError::BadToken);
                }
                Bound::Excluded((zone.to_owned(), name.to_owned()))
            }
        };
        let empty = Project::default();
        let p = self.projects.get(project).unwrap_or(&empty);
        let mut rest = p
            .reservations
            .range((start, Bound::Unbounded))
            .filter(|((zone, _), _)| !self.unreachable.contains(zone));
        let page: Vec<(&Key, &Stored)> = rest.by_ref().take(page_size).collect();
        let more = rest.next().is_some();

        let mut items: BTreeMap<String, Vec<Value>> = p
            .zones
            .iter()
            .filter(|z| !self.unreachable.contains(*z))
            .map(|z| (format!("zones/{z}"), Vec::new()))
            .collect();
        for ((zone, name), stored) in &page {
            items
                .entry(format!("zones/{zone}"))
                .or_default()
                .push(reservation_json(project, zone, name, stored));
        }
        let items: Map<String, Value> = items
            .into_iter()
            .map(|(scope, reservations)| {
                let scoped = if reservations.is_empty() {
                    no_results_warning(&scope)
                } else {
                    json!({ "reservations": reservations })
                };
                (scope, scoped)
            })
            .collect();

        let mut list = json!({
            "kind": "compute#reservationAggregatedList",
            "id": format!("projects/{project}/aggregated/reservations"),
            "items": items,
            "selfLink": format!("{API_ROOT}/projects/{project}/aggregated/reservations"),
        });
        if more
            && let Some(((zone, name), _)) = page.last()
            && let Some(list) = list.as_object_mut()
        {
            list.insert(
                "nextPageToken".to_owned(),
                Value::String(format!("{zone}.{name}")),
            );
        }
        mark_unreachable(&mut list, &self.unreachable, partial);
        Ok(list)
    }
}

fn no_results_warning(scope: &str) -> Value {
    json!({
        "warning": {
            "code": "NO_RESULTS_ON_PAGE",
            "message": format!("There are no results for scope '{scope}' on this page."),
            "data": [{ "key": "scope", "value": scope }]
        }
    })
}

fn reservation_json(project: &str, zone: &str, name: &str, stored: &Stored) -> Value {
    let zone_url = format!("{API_ROOT}/projects/{project}/zones/{zone}");
    json!({
        "kind": "compute#reservation",
        "id": stored.id.to_string(),
        "name": name,
        "zone": zone_url,
        "selfLink": format!("{zone_url}/reservations/{name}"),
        "specificReservation": {
            // int64 travels as a JSON string, as in the real API.
            "count": stored.spec.count.to_string(),
            "inUseCount": stored.spec.in_use_count.to_string(),
            "instanceProperties": { "machineType": stored.spec.machine_type },
        },
        "specificReservationRequired": false,
        "status": stored.spec.status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(count: i64) -> ReservationSpec {
        ReservationSpec {
            count,
            in_use_count: 0,
            machine_type: "n2-standard-4".into(),
            status: "READY".into(),
        }
    }

    fn names(page: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for scoped in page["items"].as_object().expect("items").values() {
            for r in scoped["reservations"].as_array().into_iter().flatten() {
                out.push(r["name"].as_str().expect("name").to_owned());
            }
        }
        out
    }

    #[test]
    fn pages_follow_keys_and_survive_deletes() {
        let mut s = Store::default();
        for (zone, name) in [
            ("a-b1-a", "r1"),
            ("a-b1-a", "r2"),
            ("a-b1-b", "r3"),
            ("a-b1-b", "r4"),
        ] {
            s.put("proj-1", zone, name, spec(1));
        }
        let first = s.aggregated_page("proj-1", 2, None, false).expect("page");
        assert_eq!(names(&first), ["r1", "r2"]);
        let token = first["nextPageToken"].as_str().expect("token").to_owned();
        assert!(s.delete("proj-1", "a-b1-a", "r2"));
        let second = s
            .aggregated_page("proj-1", 2, Some(&token), false)
            .expect("page");
        assert_eq!(names(&second), ["r3", "r4"]);
        assert!(second.get("nextPageToken").is_none());
        assert!(second["items"]["zones/a-b1-a"]["warning"].is_object());
        assert_eq!(
            s.aggregated_page("proj-1", 2, Some("nodot"), false),
            Err(PageError::BadToken)
        );
    }

    #[test]
    fn replace_keeps_the_id() {
        let mut s = Store::default();
        let a = s.put("proj-1", "a-b1-a", "r1", spec(1));
        let b = s.put("proj-1", "a-b1-a", "r1", spec(3));
        assert_eq!(a["id"], b["id"]);
        assert_eq!(b["specificReservation"]["count"], "3");
    }

    #[test]
    fn calls_are_counted_per_project_and_reset() {
        let mut s = Store::default();
        assert_eq!(s.count_call("proj-1"), Duration::ZERO);
        s.count_call("proj-1");
        s.set_delay(Duration::from_millis(5));
        assert_eq!(s.count_call("proj-2"), Duration::from_millis(5));
        assert_eq!(
            s.calls(),
            &BTreeMap::from([("proj-1".to_owned(), 2), ("proj-2".to_owned(), 1)])
        );
        s.reset_calls();
        assert!(s.calls().is_empty());
        s.set_delay(Duration::ZERO);
        assert_eq!(s.count_call("proj-1"), Duration::ZERO);
    }

    #[test]
    fn failures_count_down_and_replace() {
        let mut s = Store::default();
        s.fail_next(5, Failure::default());
        let teapot = Failure {
            status: 418,
            retry_after_s: Some(2),
        };
        s.fail_next(1, teapot);
        assert_eq!(s.take_failure(), Some(teapot));
        assert_eq!(s.take_failure(), None);
    }
}
