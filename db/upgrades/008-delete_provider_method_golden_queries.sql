-- payrail.delete_provider_method took p_with_golden_queries when golden queries came: its
-- two-argument form would make calls of the new one ambiguous.
select payrail._run_upgrade_step('008-delete_provider_method_golden_queries', $step$
begin
  drop function if exists payrail.delete_provider_method(bigint, integer);
end
$step$);
