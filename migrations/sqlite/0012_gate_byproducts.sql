-- What a gate's own run left in the work tree, and what an attempt left out because of it.
--
-- gates.byproducts: a JSON object {"files": [{"path", "sha256"}], "omitted": n} naming the untracked
-- files that did not exist (or were only an earlier gate's byproduct) when the gate started and
-- did when it ended: `__pycache__/*.pyc`, coverage data, build output nobody ignored. NULL when the
-- gate created none, and for gates recorded before this migration.
--
-- pr_attempts.left_out: the same shape, the byproducts an attempt did not take into its patch
-- because their content was still the gate's. NULL when it left nothing out.
ALTER TABLE gates ADD COLUMN byproducts TEXT;
ALTER TABLE pr_attempts ADD COLUMN left_out TEXT;
