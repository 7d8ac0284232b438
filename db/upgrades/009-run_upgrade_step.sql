-- Every step runs through payrail._run_upgrade_step (012-deployments.sql), the one guard and
-- record, since steps stopped guarding themselves: payrail._upgrade_due, their old guard, goes.
select payrail._run_upgrade_step('009-run_upgrade_step', $step$
begin
  drop function if exists payrail._upgrade_due(text);
end
$step$);
