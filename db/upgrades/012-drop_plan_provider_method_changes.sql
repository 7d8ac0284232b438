-- payrail.plan_provider_method_changes planned the write path's changes in the database before
-- payrail.save_provider_methods judged and saved a batch in one statement: nothing calls it any more.
select payrail._run_upgrade_step('012-drop_plan_provider_method_changes', $step$
begin
  drop function if exists payrail.plan_provider_method_changes(bigint[], text[], text[], text[], boolean[], integer[]);
end
$step$);
