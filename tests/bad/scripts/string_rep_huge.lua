-- expect: string_rep_huge.lua:2: resulting string too large
return string.rep("x", 1 << 40)
