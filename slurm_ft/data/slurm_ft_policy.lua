--[[
slurm-ft's job_submit policy, as a Lua module (slurmctld's job_submit/lua). A site's own job_submit.lua
loads it and calls it beside the site's rules; etc/job_submit.lua is such a script, with nothing of the
site's in it yet (docs/plugin.md, "Beside your own job_submit.lua").

	local slurm_ft = dofile(here .. "slurm_ft_policy.lua")
	slurm_ft.configure{ft_partitions = {"train"}, ckpt_roots = {"/scratch"}, expedite = false}
	... slurm_ft.job_submit(job_desc, part_list, submit_uid) in slurm_job_submit
	... slurm_ft.job_modify(job_desc, job_rec, part_list, modify_uid) in slurm_job_modify

A job submitted with the slurm-ft SPANK plugin's options (sbatch --ft-ckpt-dir=DIR, --ft-min-nodes,
--ft-hot-spares, --ft-replica-groups, --ft-hang-timeout, --ft-max-restarts) reaches slurmctld with them in its job control
environment (SLURM_FT_*). This policy checks them again (the job control environment is the user's
data), applies the site rules given to configure(), writes the fault-tolerance tag into AdminComment (which
only admins can change; the controller trusts only that field where this policy is installed) and makes
the job requeueable. Jobs without those options pass through untouched. It defines no global: a site's
slurm_job_submit stays the site's.
The tag grammar is slurm_ft/job/tag.py's: keep TAG_HEAD, KEYS and encode() in step with it.
--]]

local M = {}

-- site rules, set by configure()
local FT_PARTITIONS = {}        -- FT jobs only in these partitions; {} = any (the first is the default's)
local CKPT_ROOTS = {}           -- --ft-ckpt-dir must be under one of these; {} = any
local REQUEUE_EXPEDITE = false  -- Slurm >= 25.11 with SlurmctldParameters=enable_expedited_requeue

local TAG_HEAD = "slurm-ft:v1"
-- job control variable, tag key, lowest and highest value (nil: the checkpoint directory), in tag order
local KEYS = {
	{"SLURM_FT_CKPT_DIR", "ckpt"},
	{"SLURM_FT_MIN_NODES", "min_nodes", 1, 100000},
	{"SLURM_FT_HOT_SPARES", "hot_spares", 0, 10000},
	{"SLURM_FT_REPLICA_GROUPS", "replica_groups", 2, 1000},   -- written with hot_spares (train_nodes first)
	{"SLURM_FT_HANG_TIMEOUT", "hang_timeout", 1, 604800},
	{"SLURM_FT_MAX_RESTARTS", "max_restarts", 0, 1000},
}
local DEFAULT_MAX_RESTARTS = "5"
local MAX_DIR_LEN = 1024

-- percent-encoding as Python's urllib.parse.quote(value, safe="/")
local function encode(value)
	return (value:gsub("[^A-Za-z0-9_.~/%-]", function(c) return string.format("%%%02X", c:byte()) end))
end

-- strict UTF-8 as Python decodes it (no overlong forms, no surrogates, nothing past U+10FFFF): the
-- controller reads the tag's directory that way and ignores a tag it cannot decode
local function valid_utf8(s)
	local i, n = 1, #s
	while i <= n do
		local c, need, lo, hi = s:byte(i), 0, 128, 191
		if c < 128 then need = 0
		elseif c >= 194 and c <= 223 then need = 1
		elseif c == 224 then need, lo = 2, 160
		elseif c == 237 then need, hi = 2, 159
		elseif c >= 225 and c <= 239 then need = 2
		elseif c == 240 then need, lo = 3, 144
		elseif c >= 241 and c <= 243 then need = 3
		elseif c == 244 then need, hi = 3, 143
		else return false end
		for k = 1, need do
			local b = s:byte(i + k)
			if b == nil then return false end
			if k == 1 then
				if b < lo or b > hi then return false end
			elseif b < 128 or b > 191 then return false end
		end
		i = i + need + 1
	end
	return true
end

local function bad_dir(d)
	if d:sub(1, 1) ~= "/" then return "must be an absolute path" end
	if #d > MAX_DIR_LEN then return "is longer than " .. MAX_DIR_LEN .. " characters" end
	if d:find("[%c]") then return "contains a control character" end
	if not valid_utf8(d) then return "is not valid UTF-8 (slurm-ft reads the directory as UTF-8: rename it)" end
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

-- Hot spares: the job holds N + K nodes and its batch step, slurm-ft's supervisor, trains on N and
-- relaunches on a spare of its own allocation. The controller then leaves such a job's faults to it, so
-- only a job whose batch script is the starter `slurm-ft sbatch` writes may say so (a script that
-- merely claims to be one can only keep its own job from being recovered).
local STARTER_MARK = "\n# Generated by `slurm-ft sbatch`: "
local NO_VAL = slurm.NO_VAL or 4294967294

-- N, the training step's size, for K hot spares; or nil and why not
local function train_nodes(job_desc, k)
	local script = job_desc.script
	if script == nil or not script:find(STARTER_MARK, 1, true) then
		return nil, "hot spares and replica groups need slurm-ft's supervisor in the batch step: submit with " ..
			"`slurm-ft sbatch --hot-spares` or `--replica-groups`"
	end
	local lo, hi = job_desc.min_nodes, job_desc.max_nodes
	if lo == nil or lo == NO_VAL or lo == 0 or (hi ~= nil and hi ~= NO_VAL and hi ~= 0 and hi ~= lo) then
		return nil, "hot spares and replica groups need a fixed node count (-N N+K)"
	end
	if lo <= k then return nil, "-N " .. lo .. " leaves no node to train on" end
	return lo - k, nil
end

-- the replica groups' count R, checked (nil when not asked for), or false and why not
local function replica_groups(values)
	local v = values.SLURM_FT_REPLICA_GROUPS
	if v == nil then return nil, nil end
	local n = (v:match("^%d%d?%d?%d?$") and tonumber(v)) or nil
	if n == nil or n < 2 or n > 1000 then
		return false, "--ft-replica-groups " .. v .. ": must be a whole number from 2 to 1000"
	end
	return n, nil
end

-- the tag for these values, or nil and the reason they are refused
-- (no partition given: the default one, which must then be listed first in FT_PARTITIONS)
local function tag_for(values, partition, job_desc)
	local parts = {TAG_HEAD}
	if values.SLURM_FT_HANG_TIMEOUT ~= nil and values.SLURM_FT_CKPT_DIR == nil then
		return nil, "--ft-hang-timeout needs --ft-ckpt-dir: restarts after a hang are counted in the " ..
			"checkpoint directory, and without one --ft-max-restarts could never end them"
	end
	local groups, gwhy = replica_groups(values)
	if groups == false then return nil, gwhy end
	for _, k in ipairs(KEYS) do
		local v = values[k[1]]
		if k[2] == "hot_spares" and v == nil and groups ~= nil then v = "0" end
		if k[3] == nil then
			if v ~= nil then
				if #v > 1 and v:sub(-1) == "/" then v = v:sub(1, -2) end
				local why = bad_dir(v)
				if why then
					if not valid_utf8(v) then v = encode(v) end   -- its bytes are not text: shown encoded
					return nil, "--ft-ckpt-dir " .. v .. ": the checkpoint directory " .. why
				end
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
				if k[2] == "replica_groups" then
					-- written with hot_spares and train_nodes, above
				elseif k[2] ~= "hot_spares" then
					table.insert(parts, k[2] .. "=" .. string.format("%d", n))
				elseif n > 0 or groups ~= nil then
					local train, why = train_nodes(job_desc, n)
					if train == nil then
						if groups ~= nil then opt, v = "--ft-replica-groups", tostring(groups) end
						return nil, opt .. " " .. v .. ": " .. why
					end
					table.insert(parts, "hot_spares=" .. string.format("%d", n))
					table.insert(parts, "train_nodes=" .. string.format("%d", train))
					if groups ~= nil then
						if train % groups ~= 0 then
							return nil, "--ft-replica-groups " .. groups .. ": " .. train ..
								" training node(s) are not a whole number of groups"
						end
						table.insert(parts, "replica_groups=" .. string.format("%d", groups))
					end
				end
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

local function strings(name, v)
	if type(v) ~= "table" then error("slurm_ft.configure: " .. name .. " must be a list of strings", 3) end
	for _, x in ipairs(v) do
		if type(x) ~= "string" or x == "" then error("slurm_ft.configure: " .. name .. " must be a list of strings", 3) end
	end
	return v
end

-- The site's rules: {ft_partitions = {...}, ckpt_roots = {...}, expedite = bool}; an unknown key or a bad
-- value is an error, so slurmctld refuses the script with the reason in its log rather than run a typo.
function M.configure(rules)
	for k, _ in pairs(rules) do
		if k ~= "ft_partitions" and k ~= "ckpt_roots" and k ~= "expedite" then
			error("slurm_ft.configure: unknown rule '" .. tostring(k) .. "' (ft_partitions, ckpt_roots, expedite)", 2)
		end
	end
	if rules.expedite ~= nil and type(rules.expedite) ~= "boolean" then
		error("slurm_ft.configure: expedite must be true or false", 2)
	end
	FT_PARTITIONS = strings("ft_partitions", rules.ft_partitions or {})
	CKPT_ROOTS = strings("ckpt_roots", rules.ckpt_roots or {})
	REQUEUE_EXPEDITE = rules.expedite == true
end

-- slurm.SUCCESS for a job without --ft-* options (untouched) or one it tagged; slurm.ERROR, with the
-- reason told to the user, for one it refuses
function M.job_submit(job_desc, part_list, submit_uid)
	local values = ft_values(job_desc)
	if values == nil then return slurm.SUCCESS end
	local tag, why = tag_for(values, job_desc.partition, job_desc)
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
function M.job_modify(job_desc, job_rec, part_list, modify_uid)
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
return M
