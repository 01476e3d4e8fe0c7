-- expect: the script needs more than 1024 MiB of Lua memory
-- the Lua state's memory ceiling stops a script that grows without end
local t, s = {}, string.rep("x", 1 << 20)
for i = 1, 1e7 do t[i] = s .. i end
