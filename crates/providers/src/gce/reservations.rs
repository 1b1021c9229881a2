//! The reservations listing: `GET {project}/aggregated/reservations`, every
//! page, each page tried again on 429, 5xx and transport errors, and the
//! access token refreshed once on a 401.

use backon::Retryable;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};

use super::http::{MAX_RETRY_AFTER, PageError, from_reqwest, read_body, retry_after};
use super::paging::{Listing, read_all_pages};
use super::{GceProvider, wire};
use crate::auth::TOKEN_SCOPE;
use crate::credentials::Material;
use crate::{ProviderError, ProviderFuture, ProviderReservation, ReservationProvider};

/// The reservations listing of one call, with its credentials: the token is
/// refreshed at most once on a 401, whichever page it answers.
struct Reservations<'a> {
    provider: &'a GceProvider,
    material: Material,
    authorization: Option<HeaderValue>,
    refreshed: bool,
}

impl Listing for Reservations<'_> {
    type Item = ProviderReservation;

    async fn page(
        &mut self,
        page_token: Option<&str>,
    ) -> Result<(Vec<ProviderReservation>, Option<String>), ProviderError> {
        let provider = self.provider;
        let body = loop {
            match provider.fetch_page(page_token, &self.authorization).await {
                Err(ProviderError::Status { status: 401 })
                    if !self.refreshed
                        && matches!(self.material, Material::Key { .. } | Material::Metadata) =>
                {
                    // A token revoked or expired early: drop it, take a fresh
                    // one and ask for this page once more.
                    tracing::info!(
                        project = %provider.config.project,
                        "gce answered 401: refreshing the access token once"
                    );
                    self.refreshed = true;
                    self.authorization = provider
                        .authorization(&self.material, TOKEN_SCOPE, true)
                        .await?;
                }
                other => break other?,
            }
        };
        let parsed = wire::parse_page(&body, &provider.config.project)?;
        Ok((parsed.reservations, parsed.next_page_token))
    }
}

impl GceProvider {
    async fn list_all(&self) -> Result<Vec<ProviderReservation>, ProviderError> {
        let (material, authorization) = self.admitted(TOKEN_SCOPE).await?;
        let mut listing = Reservations {
            provider: self,
            material,
            authorization,
            refreshed: false,
        };
        let (reservations, pages) = read_all_pages(&mut listing).await?;
        tracing::debug!(
            project = %self.config.project,
            pages,
            reservations = reservations.len(),
            "listed gce reservations"
        );
        Ok(reservations)
    }

    /// One page, tried again on 429, 5xx and transport errors with
    /// exponential backoff and jitter (a `Retry-After` up to 30 s replaces
    /// the wait). Pages already read are never asked for again.
    async fn fetch_page(
        &self,
        page_token: Option<&str>,
        authorization: &Option<HeaderValue>,
    ) -> Result<Vec<u8>, ProviderError> {
        let once = || self.fetch_page_once(page_token, authorization);
        once.retry(self.backoff())
            .when(|e: &PageError| e.error.is_retryable() && e.error.status() != Some(408))
            .adjust(|e: &PageError, wait| {
                wait.map(|w| e.retry_after.map_or(w, |r| r.min(MAX_RETRY_AFTER)))
            })
            .notify(|e: &PageError, wait| {
                tracing::info!(
                    project = %self.config.project,
                    error = %e.error,
                    wait_ms = wait.as_millis() as u64,
                    "gce page request failed: trying again"
                );
            })
            .await
            .map_err(|e| e.error)
    }

    async fn fetch_page_once(
        &self,
        page_token: Option<&str>,
        authorization: &Option<HeaderValue>,
    ) -> Result<Vec<u8>, PageError> {
        let mut request = self
            .client
            .get(self.list_url.clone())
            .header(ACCEPT, "application/json");
        if let Some(size) = self.options.page_size {
            request = request.query(&[("maxResults", size)]);
        }
        if let Some(token) = page_token {
            request = request.query(&[("pageToken", token)]);
        }
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value.clone());
        }
        let started = std::time::Instant::now();
        let sent = request.send().await;
        let telemetry = self.options.telemetry.as_deref();
        if let Some(t) = telemetry {
            t.request(
                sent.as_ref().ok().map(|r| r.status().as_u16()),
                started.elapsed(),
            );
        }
        let response = sent.map_err(from_reqwest)?;
        let status = response.status();
        if !status.is_success() {
            tracing::debug!(
                project = %self.config.project,
                status = status.as_u16(),
                "gce list failed"
            );
            let retry_after = retry_after(&response);
            return Err(PageError {
                error: ProviderError::Status {
                    status: status.as_u16(),
                },
                retry_after,
            });
        }
        let body = read_body(response).await?;
        if let Some(t) = telemetry {
            t.page();
        }
        Ok(body)
    }
}

impl ReservationProvider for GceProvider {
    fn list_reservations(&self) -> ProviderFuture<'_, Vec<ProviderReservation>> {
        Box::pin(self.list_all())
    }
}
