//! Figure 3: the reads, each next to a trivial handler answering the same
//! bytes and to its statements run directly; and the grants they read when
//! figure 1 is skipped.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use serde_json::json;

use super::{Bench, RssWatch, show};
use crate::direct::{GrantCtx, GrantSql};
use crate::http::{BodyFn, FixedServer, HttpOp};
use crate::load::{self, Outcome, Stop};
use crate::procs::{self, ApiServer, Database};
use crate::reads::{self, ReadSql};
use crate::report::{ReadFigure, Report};
use crate::setup::{self, Api, TENANT};
use crate::{CLIENTS, say};

/// Runs `workers` for a 1 s warm-up (discarded), then for `dur`.
async fn warm_run<W: load::Op, F, Fut>(make: F, dur: Duration) -> anyhow::Result<Outcome>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<W>>>,
{
    load::run(make().await?, Stop::After(Duration::from_secs(1))).await?;
    load::run(make().await?, Stop::After(dur)).await
}

/// One read: the API (and, for `get`, a second api-server with the system
/// clock), the trivial handler answering the same bytes to the same client
/// with the same requests, and the request's statements run directly.
#[expect(clippy::too_many_arguments, reason = "one call site, named arguments")]
async fn read_figure(
    db: &Database,
    server: &ApiServer,
    system: Option<&ApiServer>,
    path: &str,
    token: &str,
    body: BodyFn,
    fixed: Bytes,
    sql: (Arc<Vec<String>>, bool),
    dur: Duration,
) -> anyhow::Result<ReadFigure> {
    let http = |addr| {
        let body = body.clone();
        move || HttpOp::many(CLIENTS, addr, path, token, body.clone())
    };
    let api = warm_run(http(server.addr), dur).await?;
    show("HTTP API", &api);
    let api_system_clock = match system {
        Some(s) => {
            let o = warm_run(http(s.addr), dur).await?;
            show("HTTP API, BC_CLOCK=system", &o);
            Some(o)
        }
        None => None,
    };
    let trivial = {
        let fixed = FixedServer::start(fixed)?;
        warm_run(http(fixed.addr), dur).await?
    };
    show("trivial hyper", &trivial);
    let sql_run = |full: bool| {
        let (ids, list) = sql.clone();
        let secret: Arc<str> = token.into();
        move || {
            let ids = ids.clone();
            let secret = secret.clone();
            async move {
                Ok(db
                    .connections(CLIENTS)
                    .await?
                    .into_iter()
                    .map(|conn| ReadSql {
                        conn,
                        secret: secret.clone(),
                        ids: ids.clone(),
                        list,
                        full,
                    })
                    .collect::<Vec<_>>())
            }
        }
    };
    let sql_full = warm_run(sql_run(true), dur).await?;
    show("direct SQL: authenticate, clock, query", &sql_full);
    let sql_query = warm_run(sql_run(false), dur).await?;
    show("direct SQL: the query alone", &sql_query);
    Ok(ReadFigure {
        api,
        api_system_clock,
        trivial,
        sql_full,
        sql_query,
    })
}

pub(crate) async fn figure_reads(
    Bench { db, server, p }: Bench<'_>,
    dur: Duration,
    report: &mut Report,
) -> anyhow::Result<()> {
    say(
        "figure 3: reservationGrants.get and list (1000 items), 16 clients, next to a trivial \
         hyper handler",
    );
    let ids: Vec<String> = {
        #[derive(diesel::QueryableByName)]
        struct Id {
            #[diesel(sql_type = Text)]
            grant_id: String,
        }
        let mut conn = db.connect().await?;
        diesel::sql_query(
            "SELECT grant_id FROM grants WHERE tenant_id = 'acme' ORDER BY grant_id LIMIT 1000",
        )
        .load::<Id>(&mut conn)
        .await?
        .into_iter()
        .map(|r| r.grant_id)
        .collect()
    };
    anyhow::ensure!(!ids.is_empty(), "no grants to read");
    let ids = Arc::new(ids);
    let api = Api::new(&server.url());
    let log = procs::workspace_root().join("target/bench/api-server-system-clock.log");
    let system = ApiServer::start(db, "system", &report.log_filter, &log).await?;

    let rss = RssWatch::start(server, "3");
    let result = async {
        say(" get:");
        let get_body: BodyFn = {
            let ids = ids.clone();
            Arc::new(move |i| {
                json!({ "tenantId": TENANT, "grantId": load::round_robin(&ids, i) }).to_string()
            })
        };
        let sample = api
            .raw(
                &p.tenant_token,
                "reservationGrants/get",
                &json!({ "tenantId": TENANT, "grantId": <[String]>::first(&ids) }),
            )
            .await?;
        report.get_bytes = sample.len();
        report.get = Some(
            read_figure(
                db,
                server,
                Some(&system),
                "/api/compute/reservationGrants/get",
                &p.tenant_token,
                get_body,
                Bytes::from(sample),
                (ids.clone(), false),
                dur,
            )
            .await?,
        );

        say(" list:");
        let list_req = json!({ "tenantId": TENANT });
        let sample = api
            .raw(&p.tenant_token, "reservationGrants/list", &list_req)
            .await?;
        report.list_items = serde_json::from_slice::<serde_json::Value>(&sample)?
            .get("items")
            .and_then(serde_json::Value::as_array)
            .map_or(0, Vec::len);
        report.list_bytes = sample.len();
        let list_body: BodyFn = {
            let s = list_req.to_string();
            Arc::new(move |_| s.clone())
        };
        report.list = Some(
            read_figure(
                db,
                server,
                None,
                "/api/compute/reservationGrants/list",
                &p.tenant_token,
                list_body,
                Bytes::from(sample),
                (ids.clone(), true),
                dur,
            )
            .await?,
        );
        report.rss.push(rss.done(server)?);
        let mut conn = db.connect().await?;
        let cost = reads::list_cost(&mut conn, p.now).await?;
        say(&format!(
            "  one list answer: storage call {:.1} ms, JSON via Value {:.1} ms, \
             JSON direct {:.1} ms",
            cost.storage.as_secs_f64() * 1e3,
            cost.via_value.as_secs_f64() * 1e3,
            cost.direct.as_secs_f64() * 1e3
        ));
        report.list_cost = Some(cost);
        anyhow::Ok(())
    }
    .await;
    system.stop().await?;
    result
}

/// 1,200 grants on the hot SQL reservation, for the reads when figure 1 is skipped.
pub(crate) async fn fill_grants(db: &Database, p: &setup::Platform) -> anyhow::Result<()> {
    let ctx = GrantCtx::new("fill", p, p.hot_reservation("sql"));
    let workers = db
        .connections(CLIENTS)
        .await?
        .into_iter()
        .map(GrantSql::on(ctx))
        .collect();
    load::run(workers, Stop::Count(1200)).await?;
    Ok(())
}
