-- coroutine.resume catches errors as pcall does.
while true do coroutine.resume(coroutine.create(function() while true do end end)) end
