--[[
slurm-ft job_submit policy (Slurm's job_submit/lua: JobSubmitPlugins=lua, this file next to slurm.conf).

A job submitted with the slurm-ft SPANK plugin's options (sbatch --ft-ckpt-dir=DIR, --ft-min-nodes,
--ft-hot-spares, --ft-hang-timeout, --ft-max-restarts) reaches slurmctld with them in its job control
environment (SLURM_FT_*). This policy checks them again (the job control environment is the user's
data), applies the site rules below, writes the fault-tolerance tag into AdminComment (which only
admins can change; the controller trusts only that field where this policy is installed) and makes
the job requeueable. Jobs without those options pass through untouched.
The tag grammar is slurm_ft/job/tag.py's: keep TAG_HEAD, KEYS and encode() in step with it.
--]]

-- site rules (@site: `slurm-ft lab` rewrites these lines; an admin edits them here)
local FT_PARTITIONS = {}        -- @site ft_partitions: FT jobs only in these partitions; {} = any
local CKPT_ROOTS = {}           -- @site ckpt_roots: --ft-ckpt-dir must be under one of these; {} = any
local REQUEUE_EXPEDITE = false  -- @site expedite: Slurm >= 25.11 with SlurmctldParameters=enable_expedited_requeue

local TAG_HEAD = "slurm-ft:v1"
-- job control variable, tag key, lowest and highest value (nil: the checkpoint directory), in tag order
local KEYS = {
	{"SLURM_FT_CKPT_DIR", "ckpt"},
	{"SLURM_FT_MIN_NODES", "min_nodes", 1, 100000},
	{"SLURM_FT_HOT_SPARES", "hot_spares", 0, 10000},
	{"SLURM_FT_HANG_TIMEOUT", "hang_timeout", 1, 604800},
	{"SLURM_FT_MAX_RESTARTS", "max_restarts", 0, 1000},
}
local DEFAULT_MAX_RESTARTS = "5"
local MAX_DIR_LEN = 1024

-- percent-encoding as Python's urllib.parse.quote(value, safe="/")
local function encode(value)
	return (value:gsub("[^A-Za-z0-9_.~/%-]", function(c) return string.format("%%%02X", c:byte()) end))
end

local function bad_dir(d)
	if d:sub(1, 1) ~= "/" then return "must be an absolute path" end
	if #d > MAX_DIR_LEN then return "is longer than " .. MAX_DIR_LEN .. " characters" end
	if d:find("[%c]") then return "contains a control character" end
	if d:find("//", 1, true) then return "contains an empty component (//)" end
	for part in d:gmatch("[^/]+") do
		if part == "." or part == ".." then return "contains a '" .. part .. "' component" end
	end
	return nil
end

local function under(dir, root)
	root = root:gsub("/+$", "")
	return dir == root or dir:sub(1, #root + 1) == root .. "/"
end

local function listed(value, list)
	for _, v in ipairs(list) do
		if v == value then return true end
	end
	return false
end

-- the SLURM_FT_* values of the job control environment ("NAME=value" strings); nil when there are none
local function ft_values(job_desc)
	local env = job_desc.spank_job_env
	if env == nil then return nil end
	local found, any = {}, false
	for _, entry in pairs(env) do
		local name, value = tostring(entry):match("^(SLURM_FT_[A-Z_]+)=(.*)$")
		if name ~= nil then
			found[name] = value
			any = true
		end
	end
	if any then return found end
	return nil
end

-- why an FT job may not run in these partitions (comma-separated), or nil
local function partition_refused(partitions)
	if #FT_PARTITIONS == 0 or partitions == nil then return nil end
	for each in partitions:gmatch("[^,]+") do
		if not listed(each, FT_PARTITIONS) then
			return "fault-tolerant jobs (--ft-*) run only in partition(s) " ..
				table.concat(FT_PARTITIONS, ", ") .. " here, not " .. each
		end
	end
	return nil
end

-- the tag for these values, or nil and the reason they are refused
-- (no partition given: the default one, which must then be listed first in FT_PARTITIONS)
local function tag_for(values, partition)
	local parts = {TAG_HEAD}
	for _, k in ipairs(KEYS) do
		local v = values[k[1]]
		if k[3] == nil then
			if v ~= nil then
				if #v > 1 and v:sub(-1) == "/" then v = v:sub(1, -2) end
				local why = bad_dir(v)
				if why then return nil, "--ft-ckpt-dir " .. v .. ": the checkpoint directory " .. why end
				if #CKPT_ROOTS > 0 then
					local ok = false
					for _, root in ipairs(CKPT_ROOTS) do ok = ok or under(v, root) end
					if not ok then
						return nil, "--ft-ckpt-dir " .. v .. ": not under this site's checkpoint roots (" ..
							table.concat(CKPT_ROOTS, ", ") .. ")"
					end
				end
				table.insert(parts, k[2] .. "=" .. encode(v))
			end
		else
			if v == nil and k[2] == "max_restarts" then v = DEFAULT_MAX_RESTARTS end
			if v ~= nil then
				local n = (v:match("^%d%d?%d?%d?%d?%d?%d?%d?%d?$") and tonumber(v)) or nil
				local opt = "--ft-" .. k[2]:gsub("_", "-")
				if n == nil or n < k[3] or n > k[4] then
					return nil, opt .. " " .. v .. ": must be a whole number from " .. k[3] .. " to " .. k[4]
				end
				-- hot spares need the supervisor that only `slurm-ft sbatch --hot-spares` starts (tag.py)
				if k[2] == "hot_spares" and n > 0 then
					return nil, opt .. " " .. v .. ": hot spares are not available through the plugin yet: " ..
						"submit with `slurm-ft sbatch --hot-spares` at a site without the slurm-ft plugins"
				end
				if k[2] ~= "hot_spares" then table.insert(parts, k[2] .. "=" .. string.format("%d", n)) end
			end
		end
	end
	local why = partition_refused(partition or FT_PARTITIONS[1])
	if why then return nil, why end
	return table.concat(parts, " "), nil
end

local function set_requeue(job_desc)
	job_desc.requeue = 1
	if REQUEUE_EXPEDITE and slurm.EXPEDITED_REQUEUE ~= nil then
		local flags = job_desc.bitflags or 0
		if math.floor(flags / slurm.EXPEDITED_REQUEUE) % 2 == 0 then
			job_desc.bitflags = flags + slurm.EXPEDITED_REQUEUE
		end
	end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local values = ft_values(job_desc)
	if values == nil then return slurm.SUCCESS end
	local tag, why = tag_for(values, job_desc.partition)
	if tag == nil then
		slurm.log_user("slurm-ft: %s", why)
		slurm.log_info("slurm-ft: refused a job of uid %u: %s", submit_uid, why)
		return slurm.ERROR
	end
	job_desc.admin_comment = tag
	set_requeue(job_desc)
	slurm.log_info("slurm-ft: job of uid %u tagged: %s", submit_uid, tag)
	return slurm.SUCCESS
end

-- a tagged job stays in the FT partitions: its owner's later `scontrol update job J Partition=` is checked too
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	local tagged = job_rec.admin_comment ~= nil and job_rec.admin_comment:sub(1, #TAG_HEAD + 1) == TAG_HEAD .. " "
	if modify_uid == 0 or not tagged or job_desc.partition == nil then return slurm.SUCCESS end
	local why = partition_refused(job_desc.partition)
	if why then
		slurm.log_user("slurm-ft: %s", why)
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

slurm.log_info("slurm-ft job_submit policy loaded")
return slurm.SUCCESS
