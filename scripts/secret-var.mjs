// The variable holding a webhook source's secret, as the worker reads it
// (crates/engine/src/sources.rs, `SourceConfig::secret_var`): the source's `secret`
// setting, or `{NAME}_WEBHOOK_SECRET` (upper-cased, - as _). make deploy,
// the tests and a generated copy's README all ask it here.
export const secretVar = (name, source = {}) => source.secret ?? `${name.toUpperCase().replaceAll("-", "_")}_WEBHOOK_SECRET`;
