--[[
job_submit.lua: slurmctld's job_submit/lua script (JobSubmitPlugins=lua), next to slurm.conf, calling
slurm-ft's policy module (slurm_ft_policy.lua, in the same directory) beside the site's own rules.

A site with a job_submit.lua of its own keeps it and adds the three marked parts: the dofile and
configure lines at the top, and one call in each of its two functions (docs/plugin.md). slurmctld
reloads this script when it changes; after an upgrade of slurm_ft_policy.lua alone, touch this file.
--]]

-- slurm-ft (1/3): its module, from this script's own directory
local here = debug.getinfo(1, "S").source:match("^@(.*/)[^/]*$") or "./"
local slurm_ft = dofile(here .. "slurm_ft_policy.lua")
slurm_ft.configure{
	ft_partitions = {},        -- @site ft_partitions: FT jobs only in these partitions; {} = any
	ckpt_roots = {},           -- @site ckpt_roots: --ft-ckpt-dir must be under one of these; {} = any
	expedite = false,          -- @site expedite: Slurm >= 25.11 with SlurmctldParameters=enable_expedited_requeue
}

-- the site's own rules: slurm.SUCCESS, or slurm.ERROR after telling the user why (slurm.log_user)
local function site_rules(job_desc, part_list, submit_uid)
	return slurm.SUCCESS       -- @site rules
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local rc = site_rules(job_desc, part_list, submit_uid)
	if rc ~= slurm.SUCCESS then return rc end
	return slurm_ft.job_submit(job_desc, part_list, submit_uid)        -- slurm-ft (2/3)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm_ft.job_modify(job_desc, job_rec, part_list, modify_uid)   -- slurm-ft (3/3)
end

return slurm.SUCCESS
