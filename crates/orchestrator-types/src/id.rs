//! Typed ids. Rows are numbered by the store; the newtypes keep a task id from being passed where an
//! artifact id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

macro_rules! id_type {
    ($name:ident, $what:literal) => {
        #[doc = concat!("The id of ", $what, ", assigned by the store.")]
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = crate::Error;
            fn from_str(s: &str) -> crate::Result<Self> {
                s.trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .map($name)
                    .ok_or_else(|| {
                        crate::Error::invalid(
                            $what,
                            format!("{s:?} is not an id (ids are positive integers)"),
                        )
                    })
            }
        }
    };
}

id_type!(TaskId, "a task");
id_type!(ArtifactId, "an artifact");
