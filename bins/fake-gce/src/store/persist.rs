//! The reservations as the state file keeps them ([`crate::state`]).

use serde_json::{Map, Value, json};

use super::{Project, ReservationSpec, Store, Stored};
use crate::state::{field, id, int, list, object, strings, text};

impl Store {
    /// How many reservations there are, in every project.
    pub fn reservation_count(&self) -> usize {
        self.projects.values().map(|p| p.reservations.len()).sum()
    }

    /// The reservations, their zones and the next id, as the state file
    /// holds them.
    pub(crate) fn snapshot(&self) -> Value {
        let projects: Map<String, Value> = self
            .projects
            .iter()
            .map(|(project, p)| {
                let reservations: Vec<Value> = p
                    .reservations
                    .iter()
                    .map(|((zone, name), stored)| {
                        json!({
                            "zone": zone,
                            "name": name,
                            "id": stored.id.to_string(),
                            "count": stored.spec.count,
                            "inUseCount": stored.spec.in_use_count,
                            "machineType": stored.spec.machine_type,
                            "status": stored.spec.status,
                        })
                    })
                    .collect();
                let shown = json!({ "zones": p.zones, "reservations": reservations });
                (project.clone(), shown)
            })
            .collect();
        json!({ "nextId": self.next_id.to_string(), "projects": projects })
    }

    /// A store holding what [`Store::snapshot`] wrote (and no injected
    /// failure, delay or count).
    pub(crate) fn restore(v: &Value) -> Result<Store, String> {
        let mut store = Store {
            next_id: id(v, "nextId")?,
            ..Store::default()
        };
        for (project, p) in object(v, "projects")? {
            let mut restored = Project {
                zones: strings(field(p, "zones")?, "zones")?.into_iter().collect(),
                ..Project::default()
            };
            for r in list(p, "reservations")? {
                let spec = ReservationSpec {
                    count: int(r, "count")?,
                    in_use_count: int(r, "inUseCount")?,
                    machine_type: text(r, "machineType")?.to_owned(),
                    status: text(r, "status")?.to_owned(),
                };
                let key = (text(r, "zone")?.to_owned(), text(r, "name")?.to_owned());
                restored.zones.insert(key.0.clone());
                let stored = Stored {
                    id: id(r, "id")?,
                    spec,
                };
                restored.reservations.insert(key, stored);
            }
            store.projects.insert(project.clone(), restored);
        }
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_comes_back_as_it_was() {
        let mut s = Store::default();
        let spec = |count| ReservationSpec {
            count,
            in_use_count: 1,
            machine_type: "n2-standard-4".into(),
            status: "READY".into(),
        };
        s.put("proj-1", "us-central1-a", "r1", spec(4));
        s.put("proj-1", "us-central1-b", "r2", spec(2));
        s.put("proj-2", "us-central1-a", "r3", spec(8));
        assert!(s.delete("proj-1", "us-central1-b", "r2"));
        let snapshot = s.snapshot();
        let back = Store::restore(&snapshot).expect("restores");
        assert_eq!(back.snapshot(), snapshot);
        assert_eq!(
            back.get("proj-1", "us-central1-a", "r1"),
            s.get("proj-1", "us-central1-a", "r1")
        );
        // The zone of the deleted reservation is still listed, ids go on.
        let page = back
            .aggregated_page("proj-1", 10, None, false)
            .expect("page");
        assert!(page["items"]["zones/us-central1-b"]["warning"].is_object());
        let mut back = back;
        let next = back.put("proj-1", "us-central1-a", "r9", spec(1));
        let expected = s.put("proj-1", "us-central1-a", "r9", spec(1));
        assert_eq!(next["id"], expected["id"]);
        assert_eq!(back.reservation_count(), 3);
    }

    #[test]
    fn a_malformed_store_is_refused() {
        let bad = json!({ "nextId": "1", "projects": { "p": { "zones": [], "reservations": [
            { "zone": "z", "name": "r", "id": "x", "count": 1, "inUseCount": 0,
              "machineType": "m", "status": "READY" }
        ] } } });
        assert_eq!(
            Store::restore(&bad).err().as_deref(),
            Some("'id' is not a decimal id")
        );
        assert!(Store::restore(&json!({ "projects": {} })).is_err());
    }
}
