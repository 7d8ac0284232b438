-- payrail._name_path_matches took the record to count as enabled (p_counted_draft_id) when
-- preview_search came: its one-argument form would make calls of the new one ambiguous.
select payrail._run_upgrade_step('005-name_path_matches_counted_draft', $step$
begin
  drop function if exists payrail._name_path_matches(text);
end
$step$);
