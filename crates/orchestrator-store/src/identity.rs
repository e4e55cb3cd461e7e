//! The `store_identity` table: the one id a store is given when it is made (by migration 0009,
//! on both backends). It tells this store's marks on places several stores share from the others'
//! (a pull request's hidden marker and branch on a repository that staging and production both
//! work on, where their task and attempt numbers are alike).

use crate::{Error, Result, Store};
use orchestrator_types::BoxFuture;
use sea_query::{Iden, Order, Query};

#[derive(Iden, Clone, Copy)]
enum StoreIdentity {
    Table,
    Id,
    CreatedAt,
}

impl Store {
    /// This store's identity: 32 hex digits, the same for every process that opens the store and
    /// for as long as it lives.
    pub fn identity<'a>(&'a self) -> BoxFuture<'a, Result<String>> {
        Box::pin(self.identity_unboxed())
    }

    async fn identity_unboxed(&self) -> Result<String> {
        // One row is made by the migration; should a copy of another store's row ever be added,
        // the oldest stays the identity, so it never changes under a running store.
        let stmt = Query::select()
            .column(StoreIdentity::Id)
            .from(StoreIdentity::Table)
            .order_by(StoreIdentity::CreatedAt, Order::Asc)
            .order_by(StoreIdentity::Id, Order::Asc)
            .limit(1)
            .to_owned();
        let row: Option<(String,)> = self.pool.fetch_optional(&stmt).await?;
        row.map(|(id,)| id).ok_or(Error::Corrupt {
            what: "store identity",
            message: "the store_identity table is empty".to_owned(),
        })
    }
}
