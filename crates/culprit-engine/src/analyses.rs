//! The analyses of a [`Snapshot`], as typed rows. Each is CPU work on every
//! core: call them off the async workers (`spawn_blocking`). Sweeps over a
//! large store read its files through the current tokio runtime, so they
//! must run inside one (a blocking thread of it is right).

use culprit_core::method::{
    self, overlap, usecases, BlameOptions, CriticalPath, IqcGraph, Level4, Micros, StageRatp,
    Victims, Windows,
};
use culprit_core::{MethodError, Resource};

use crate::engine::Snapshot;
use crate::error::Error;

/// An analysis of each window of a series: `((from, to), result)`.
pub type Series<T> = Vec<((Micros, Micros), T)>;

/// The level-4 blame of an analysis and the victims it explained.
#[derive(Debug)]
pub struct Blamed {
    pub victims: Victims,
    pub level4: Level4,
}

impl Snapshot {
    /// The id of query `name`, or [`MethodError::UnknownQuery`].
    pub fn query(&self, name: &str) -> Result<u32, Error> {
        self.ds
            .queries
            .get(name)
            .ok_or_else(|| MethodError::UnknownQuery(name.to_string()).into())
    }

    /// Level-4 blame (method.md sections 4-5) over the window rows in
    /// memory or read from the store bucket by bucket.
    pub fn blame(&self, opts: &BlameOptions) -> Result<Blamed, Error> {
        if self.sharded().is_some() {
            let (victims, mut series) =
                self.blame_series(opts, &Windows::one(method::window(opts)))?;
            let level4 = series.pop().unwrap_or_default();
            return Ok(Blamed { victims, level4 });
        }
        let (victims, level4) = match &self.buckets {
            None => method::blame(&self.ds, opts)?,
            Some(buckets) => {
                let reader = buckets.reader(&self.ds, runtime()?);
                method::blame_streamed(&self.ds, opts, &reader)?
            }
        };
        Ok(Blamed { victims, level4 })
    }

    /// Level 6 of each victim with the overlap baselines.
    pub fn culprits(&self, opts: &BlameOptions) -> Result<Vec<usecases::CulpritRow>, Error> {
        let windows = Windows::one(method::window(opts));
        Ok(self.culprits_in(opts, &windows)?.pop().unwrap_or_default())
    }

    /// `culprits` in each of `windows`: the sweeps (`blame_series`) here
    /// and, beside them on a thread of their own, the overlap baselines of
    /// the same victims (resolved over the windows' union, as the sweeps
    /// resolve them). The baselines need only the victims, and the sweeps
    /// leave a core idle for much of their time (the victims' slot sweep,
    /// the rows made of totals; on 5,000 hosts the baselines took about
    /// 35 ms of one core after them, `docs/performance.md`).
    fn culprits_in(
        &self,
        opts: &BlameOptions,
        windows: &Windows,
    ) -> Result<Vec<Vec<usecases::CulpritRow>>, Error> {
        let ds = &self.ds;
        let (from, to) = windows.whole();
        let union = BlameOptions {
            from: Some(from),
            to: Some(to),
            ..opts.clone()
        };
        let (blamed, baselines) = std::thread::scope(|scope| {
            let side = scope.spawn(move || -> Result<_, MethodError> {
                let queries = method::resolve_victims(ds, &union)?.queries;
                let naive = overlap::naive_series(ds, &queries, windows);
                let deep = overlap::deep_series(ds, &queries, windows);
                Ok((queries, naive, deep))
            });
            // Both before either's error is returned: a scope that ends
            // with a panicked thread not joined panics itself.
            (self.blame_series(opts, windows), side.join())
        });
        let (victims, series) = blamed?;
        let (queries, naive, deep) = baselines
            .map_err(|_| Error::Internal("the overlap baselines' thread panicked".into()))??;
        if queries != victims.queries {
            return Err(Error::Internal(
                "the overlap baselines were found for other victims than the sweeps'".into(),
            ));
        }
        Ok(series
            .iter()
            .zip(naive.iter().zip(&deep))
            .map(|(level4, (naive, deep))| usecases::culprits_from(ds, level4, naive, deep))
            .collect())
    }

    /// The iQC-Graph of the victims (section 6).
    pub fn graph(&self, opts: &BlameOptions) -> Result<(IqcGraph, Level4), Error> {
        let b = self.blame(opts)?;
        let g = IqcGraph::build(&self.ds, &b.victims.queries, &b.level4);
        Ok((g, b.level4))
    }

    pub fn hot_resources(
        &self,
        opts: &BlameOptions,
    ) -> Result<Vec<usecases::Ranked<Resource>>, Error> {
        let b = self.blame(opts)?;
        Ok(usecases::hot_resources(&self.ds, &b.level4))
    }

    pub fn slow_nodes(
        &self,
        opts: &BlameOptions,
    ) -> Result<Vec<usecases::Ranked<Option<u32>>>, Error> {
        let b = self.blame(opts)?;
        Ok(usecases::slow_nodes(&self.ds, &b.level4))
    }

    pub fn aggressive_queries(
        &self,
        opts: &BlameOptions,
    ) -> Result<Vec<usecases::Aggressor>, Error> {
        let b = self.blame(opts)?;
        Ok(usecases::aggressive_queries(&self.ds, &b.level4))
    }

    pub fn victims(&self, opts: &BlameOptions) -> Result<Vec<usecases::VictimSummary>, Error> {
        let b = self.blame(opts)?;
        let window = method::window(opts);
        let slowdowns = match &self.buckets {
            None => method::slowdown::slowdowns(&self.ds, &b.victims, window),
            Some(buckets) => {
                let reader = buckets.reader(&self.ds, runtime()?);
                method::slowdown::slowdowns_streamed(&self.ds, &b.victims, window, &reader)?
            }
        };
        Ok(usecases::victims(
            &self.ds, &b.victims, &b.level4, window, &slowdowns,
        ))
    }

    /// Level-4 blame in each window of a series, in one pass over the
    /// window rows (in memory, or read from the store once for all windows).
    pub fn blame_series(
        &self,
        opts: &BlameOptions,
        windows: &Windows,
    ) -> Result<(Victims, Vec<Level4>), Error> {
        if let Some((sweeper, buckets)) = self.sharded() {
            let shards = crate::shards::Sharded {
                runtime: runtime()?,
                snapshot: self,
                sweeper: sweeper.as_ref(),
                buckets,
            };
            return method::blame_series_sharded(&self.ds, opts, windows, &shards);
        }
        Ok(match &self.buckets {
            None => method::blame_series(&self.ds, opts, windows)?,
            Some(buckets) => {
                let reader = buckets.reader(&self.ds, runtime()?);
                method::blame_series_streamed(&self.ds, opts, windows, &reader)?
            }
        })
    }

    /// `culprits` of each window of a series (`series_windows` of the
    /// options' `from` and `to`): one sweep for all of them, each window's
    /// rows those of a call with that window.
    pub fn culprits_series(
        &self,
        opts: &BlameOptions,
        step: Micros,
    ) -> Result<Series<Vec<usecases::CulpritRow>>, Error> {
        let windows = series_of(opts, step)?;
        let rows = self.culprits_in(opts, &windows)?;
        Ok(windows.iter().zip(rows).collect())
    }

    /// `aggressive_queries` of each window of a series, from one sweep.
    pub fn aggressive_queries_series(
        &self,
        opts: &BlameOptions,
        step: Micros,
    ) -> Result<Series<Vec<usecases::Aggressor>>, Error> {
        let windows = series_of(opts, step)?;
        let (_, series) = self.blame_series(opts, &windows)?;
        Ok(windows
            .iter()
            .zip(series)
            .map(|(w, level4)| (w, usecases::aggressive_queries(&self.ds, &level4)))
            .collect())
    }

    /// The critical path of `query` (section 8).
    pub fn critical_path(&self, query: &str) -> Result<CriticalPath, Error> {
        Ok(method::critical_path(&self.ds, self.query(query)?))
    }

    /// Stage RATP of `query` (section 7). Needs the window rows in memory:
    /// take the snapshot with `windows`.
    pub fn stage_ratp(&self, query: &str) -> Result<Vec<StageRatp>, Error> {
        self.windows_in_memory("stage_ratp")?;
        Ok(method::stage_ratp(&self.ds, self.query(query)?))
    }

    /// For the analyses that read every window row from the dataset: the
    /// SQL layer must have taken the snapshot with `windows`.
    pub(crate) fn windows_in_memory(&self, function: &str) -> Result<(), Error> {
        if self.buckets.is_some() {
            return Err(Error::Internal(format!(
                "{function} needs a snapshot with its window rows in memory"
            )));
        }
        Ok(())
    }
}

/// The windows of a series from the options' `from` and `to`.
fn series_of(opts: &BlameOptions, step: Micros) -> Result<Windows, Error> {
    let (from, to) = method::window(opts);
    Ok(Windows::series(from, to, step)?)
}

/// The tokio runtime an analysis reads the store through (it runs on a
/// blocking thread of it).
pub(crate) fn runtime() -> Result<tokio::runtime::Handle, Error> {
    tokio::runtime::Handle::try_current()
        .map_err(|e| Error::Internal(format!("reading the store outside a runtime: {e}")))
}
