//! Paged listings: the page token asked for next, and reading every page
//! of a listing through one loop, whatever the listing.

use crate::ProviderError;

/// A listing never follows more pages than this (500 reservations each by
/// default): a provider that keeps answering tokens is treated as broken.
pub(super) const MAX_PAGES: usize = 10_000;

/// A paged listing: how one of its pages is read.
pub(super) trait Listing {
    /// What the listing lists.
    type Item: Send;

    /// The page of `page_token` (the first page: `None`): its items and the
    /// token of the page after it, if any. Retries are its own.
    fn page(
        &mut self,
        page_token: Option<&str>,
    ) -> impl Future<Output = Result<(Vec<Self::Item>, Option<String>), ProviderError>> + Send;
}

/// Reads every page of `listing`: the first page (no token), then the page
/// of the token each page answers, until a page answers none. An answer
/// repeating the token it was asked with, or a listing not done within
/// [`MAX_PAGES`] pages, is [`ProviderError::Malformed`]. Returns the items
/// in page order and the number of pages read.
pub(super) async fn read_all_pages<L: Listing + Send>(
    listing: &mut L,
) -> Result<(Vec<L::Item>, usize), ProviderError> {
    let mut items = Vec::new();
    let mut page_token: Option<String> = None;
    for page in 1..=MAX_PAGES {
        let (found, next) = listing.page(page_token.as_deref()).await?;
        items.extend(found);
        match next_page(page_token.as_deref(), next)? {
            None => return Ok((items, page)),
            next => page_token = next,
        }
    }
    Err(ProviderError::Malformed(format!(
        "the listing did not end within {MAX_PAGES} pages"
    )))
}

/// The page token to ask for next after a page answered `next` for
/// `current`: `None` when the listing is complete; an answer repeating the
/// token it was asked with is malformed (it would never end).
pub(crate) fn next_page(
    current: Option<&str>,
    next: Option<String>,
) -> Result<Option<String>, ProviderError> {
    match next {
        Some(next) if current == Some(next.as_str()) => Err(ProviderError::Malformed(
            "the provider answered the same page token twice".into(),
        )),
        next => Ok(next),
    }
}
