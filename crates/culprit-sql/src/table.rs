use std::sync::Arc;

use async_trait::async_trait;
use culprit_core::Table;
use culprit_store::Store;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::ExecutionPlan;

/// One stored table: the Parquet files the store's newest manifest lists,
/// looked up at every scan.
#[derive(Debug)]
pub struct StoreTable {
    store: Store,
    table: Table,
}

impl StoreTable {
    pub fn new(store: Store, table: Table) -> Self {
        StoreTable { store, table }
    }
}

#[async_trait]
impl TableProvider for StoreTable {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Parquet statistics prune row groups; DataFusion re-checks every row.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        _input: Arc<dyn ExecutionPlan>,
        _insert_op: datafusion::logical_expr::dml::InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::External(Box::new(
            culprit_store::telemetry_refusal(self.table.name()),
        )))
    }

    async fn truncate(&self, _state: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        self.insert_into(
            _state,
            Arc::new(EmptyExec::new(self.schema())),
            datafusion::logical_expr::dml::InsertOp::Overwrite,
        )
        .await
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let manifest = self
            .store
            .manifest()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let paths = manifest.files_of(self.table).map(|f| f.path.as_str());
        scan_files(
            &self.store,
            paths,
            self.schema(),
            state,
            projection,
            filters,
            limit,
        )
        .await
    }
}

/// A scan of some of the store's Parquet files (relative paths) as one
/// table of `schema`: nothing to read is an empty scan.
pub(crate) async fn scan_files<'a>(
    store: &Store,
    paths: impl Iterator<Item = &'a str>,
    schema: SchemaRef,
    state: &dyn Session,
    projection: Option<&Vec<usize>>,
    filters: &[Expr],
    limit: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let urls = paths
        .map(|p| ListingTableUrl::parse(store.file_url(p)))
        .collect::<Result<Vec<_>>>()?;
    if urls.is_empty() {
        let schema = match projection {
            Some(p) => Arc::new(schema.project(p)?),
            None => schema,
        };
        return Ok(Arc::new(EmptyExec::new(schema)));
    }
    let options =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    ListingTable::try_new(config)?
        .scan(state, projection, filters, limit)
        .await
}
