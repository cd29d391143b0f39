--[[
hadar's job_submit plugin for Slurm (JobSubmitPlugins=lua; this file as job_submit.lua next to slurm.conf).

A user keeps sbatch and hands a GPU job to hadar by marking it with a comment:

  sbatch --comment=hadar --gres=gpu:1 job.sh          rigid: hadar picks its node (its GPU type), never stops it
  sbatch --comment=hadar:sigterm --requeue --gres=gpu:1 job.sh
                                                      the script declares that it saves its state on SIGTERM
                                                      and resumes from it when requeued

Such a job is held at submission (priority 0) until `hadar serve --slurm` releases it on a node it chooses.
Jobs without the mark, and jobs that ask for no GPU, are left alone; hadar's own jobs (comment
hadar:<run id>:...) are submitted held by hadar itself and are left alone here too.

The release is hadar's: a user who is not one of RELEASERS below may not change the priority of (so may not
release) a held, marked job. Add the uid hadar runs as (root, the SlurmUser, or an operator account).
]]

local MARKS = { ["hadar"] = true, ["hadar:sigterm"] = true }
local RELEASERS = { [0] = true }  -- uids that may release a marked job: root; add hadar's

local function asks_for_gpus(job_desc)
	for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }) do
		local tres = job_desc[field]
		if tres ~= nil and string.find(tres, "gpu", 1, true) ~= nil then
			return true
		end
	end
	return false
end

local function marked(comment)
	return comment ~= nil and MARKS[comment] == true
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if marked(job_desc.comment) and asks_for_gpus(job_desc) then
		job_desc.priority = 0
		slurm.log_info("hadar: job of uid %u marked %s held for hadar", submit_uid, job_desc.comment)
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if marked(job_rec.comment) and job_desc.priority ~= nil and job_desc.priority ~= slurm.NO_VAL
			and RELEASERS[modify_uid] ~= true then
		slurm.log_user("this job is scheduled by hadar: it is released on the GPU type hadar chooses")
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

slurm.log_info("hadar: job_submit.lua loaded")
return slurm.SUCCESS
