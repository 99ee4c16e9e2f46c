//! `GET /v1/topics`: every topic, or a page of them (`limit`, `page_token`, `prefix`).
//!
//! Without `limit` the answer lists every topic, as it always did. With it, topics come in name
//! order, at most `limit` per page, and `next_page_token` names where the next page starts
//! while more follow. The token is opaque to clients (the last name of the page, base64url); a
//! topic created or deleted between pages is seen or missed as its name falls, never twice.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::topic::TopicDto;
use crate::api::problem::ApiError;
use crate::domain::names::validate_public_topic_name;

/// The most topics one page holds.
pub const MAX_PAGE_LIMIT: usize = 1000;

/// Query of `GET /v1/topics`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TopicListQuery {
    /// At most this many topics (1 to 1000), in name order, with `next_page_token` while
    /// more follow. Without it, every topic.
    #[param(minimum = 1, maximum = 1000)]
    #[serde(default)]
    pub limit: Option<usize>,
    /// The `next_page_token` of the previous page.
    #[serde(default)]
    pub page_token: Option<String>,
    /// Only topics whose name starts with this.
    #[serde(default)]
    pub prefix: Option<String>,
}

/// What a list request asks for, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPage {
    /// The page starts after this name.
    pub after: Option<String>,
    pub prefix: Option<String>,
    /// `None`: every topic.
    pub limit: Option<usize>,
}

impl TopicListQuery {
    pub fn into_page(self) -> Result<TopicPage, ApiError> {
        if let Some(limit) = self.limit {
            if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
                return Err(ApiError::invalid_request(format!(
                    "limit must be 1 to {MAX_PAGE_LIMIT}, got {limit}"
                )));
            }
        }
        let after = match self.page_token.filter(|token| !token.is_empty()) {
            Some(token) => Some(decode_token(&token)?),
            None => None,
        };
        if after.is_some() && self.limit.is_none() {
            return Err(ApiError::invalid_request(
                "page_token continues a paged list: give limit too",
            ));
        }
        Ok(TopicPage {
            after,
            prefix: self.prefix.filter(|prefix| !prefix.is_empty()),
            limit: self.limit,
        })
    }
}

/// The token that continues after topic `last`.
pub fn page_token(last: &str) -> String {
    URL_SAFE_NO_PAD.encode(last)
}

fn decode_token(token: &str) -> Result<String, ApiError> {
    let invalid = || ApiError::invalid_request("page_token is not a token this API gave");
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
    let name = String::from_utf8(bytes).map_err(|_| invalid())?;
    validate_public_topic_name("topic", &name).map_err(|_| invalid())?;
    Ok(name)
}

/// `GET /v1/topics`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(as = TopicList)]
pub struct TopicListDto {
    pub topics: Vec<TopicDto>,
    /// With `limit`: where the next page starts, while more topics follow (absent on the
    /// last page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(limit: Option<usize>, token: Option<&str>) -> TopicListQuery {
        TopicListQuery {
            limit,
            page_token: token.map(str::to_string),
            prefix: None,
        }
    }

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        let token = page_token("orders.eu-1");
        let page = query(Some(10), Some(&token)).into_page().expect("valid");
        assert_eq!(page.after.as_deref(), Some("orders.eu-1"));
        for bad in ["!!!", "AAAA", &URL_SAFE_NO_PAD.encode("no spaces allowed")] {
            assert!(query(Some(10), Some(bad)).into_page().is_err(), "{bad}");
        }
        assert!(query(None, Some(&token)).into_page().is_err());
        assert!(query(Some(0), None).into_page().is_err());
        assert!(query(Some(1001), None).into_page().is_err());
        assert_eq!(query(None, None).into_page().expect("all").limit, None);
    }
}
