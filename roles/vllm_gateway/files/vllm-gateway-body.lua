-- Managed by vllm-deploy (role vllm_gateway): reads the request body once, as the engine will.
--
-- HAProxy's json_query is not a JSON parser: it reads the first of two `model` or `max_tokens` keys
-- where the engine (Python's json) reads the last, and misses "max_tok\u0065ns", 1e5 and " 1e5 ".
-- cjson decodes the body as Python's json does (duplicate keys: the last wins; escapes decoded;
-- numbers in any notation), and this action sets, for haproxy.cfg:
--   txn.model    the `model` the engine will serve (a string), routed through models.map
--   txn.refusal  why the body is refused, one of: invalid_json, not_object, invalid_number,
--                max_tokens_too_large, n_too_large (unset: the body may go to an engine)
--   txn.route_session  the body's `user` (a non-empty string): the key of session routing
--   txn.route_prefix   the first N characters of the prompt, or of the leading messages (system or developer
--                      messages and the first user message): the key of prefix routing
--   txn.token_cost     the most output tokens the request may ask the engine for: the largest of max_tokens,
--                      max_completion_tokens, max_output_tokens, times the sequences it generates (the larger
--                      of n and best_of, at least 1); unset when the body gives none of the three
-- Arguments: the max_tokens cap, the n / best_of cap (0 for none), N (0: no prefix key).
--
-- A second action, vllm_gateway_token_budget, counts txn.token_cost against the key's budget (below).
local cjson = require("cjson")

-- NaN, Infinity, hex and leading zeros are not JSON: refused rather than read one way here and
-- another (or not at all) by the engine.
cjson.decode_invalid_numbers(false)

-- Engine parameters the gateway caps (max_output_tokens: the Responses API's), each read as the
-- engine's pydantic reads an int.
local TOKENS = { "max_tokens", "max_completion_tokens", "max_output_tokens" }
local FAN_OUT = { "n", "best_of" }

-- A number, a numeric string ("100000", " 1e5 ", "100_000": pydantic takes these), true/false
-- (pydantic's 1/0) or null/absent (nil). Anything else (a word, "0x10", fullwidth digits, a list)
-- is `false`: the gateway cannot say what the engine would read, so it refuses.
local function as_number(value)
    local kind = type(value)
    if value == nil or value == cjson.null or kind == "boolean" then
        return nil
    end
    if kind == "number" then
        return value
    end
    if kind == "string" then
        local text = value:match("^%s*(.-)%s*$"):gsub("(%d)_(%d)", "%1%2"):gsub("(%d)_(%d)", "%1%2")
        if text:match("^[+-]?%d+%.?%d*$") or text:match("^[+-]?%d*%.?%d+[eE][+-]?%d+$")
            or text:match("^[+-]?%d+%.?%d*[eE][+-]?%d+$") then
            return tonumber(text)
        end
    end
    return false
end

-- The first of `names` whose value is above `cap` (or not a number), and the refusal it earns.
local function over_cap(body, names, cap, refusal)
    for _, name in ipairs(names) do
        local number = as_number(body[name])
        if number == false then
            return "invalid_number"
        end
        -- NaN compares false with everything: a body cannot carry one (decode_invalid_numbers).
        if number and cap > 0 and number > cap then
            return refusal
        end
    end
    return nil
end

-- Whether a string literal of `raw` (JSON that cjson decoded) holds a raw control character: cjson
-- takes one, Python's json (strict) does not. With the escapes gone, every string without one is
-- `"[^"\1-\31]*"`: removing those leaves a quote only where a string holds a control character.
local function control_in_string(raw)
    local unescaped = raw:gsub("\\.", "")
    return unescaped:gsub('"[^"\1-\31]*"', ""):find('"', 1, true) ~= nil
end

-- The text of a message's content, a Messages API `system` or a Responses API input item: a string, or
-- the `text` of each part of a list ({"type": "text", "text": ...}); images and other parts add nothing.
local function content_text(content)
    if type(content) == "string" then
        return content
    end
    if type(content) ~= "table" then
        return ""
    end
    local parts = {}
    for _, part in ipairs(content) do
        if type(part) == "string" then
            parts[#parts + 1] = part
        elseif type(part) == "table" and type(part.text) == "string" then
            parts[#parts + 1] = part.text
        end
    end
    return table.concat(parts, "\n")
end

-- The leading `limit` characters of what the engine will prefill first: instructions / system, then the
-- prompt (the first of a list; token ids as numbers) or the messages up to the first user message, each as
-- "role\ntext\n". What two requests share at the start they share here, so they hash alike, and every turn
-- of one conversation has the same key; nil when the body has no prompt at all.
local function leading_text(body, limit)
    local pieces, chars = {}, 0
    local function add(text)
        if chars < limit and type(text) == "string" and text ~= "" then
            pieces[#pieces + 1] = text
            chars = chars + (utf8.len(text) or #text)
        end
    end
    add(body.instructions)
    add(content_text(body.system))
    local prompt = body.prompt
    if type(prompt) == "table" then
        prompt = prompt[1]
    end
    if type(prompt) == "string" then
        add(prompt)
    elseif type(prompt) == "number" or type(prompt) == "table" then
        local ids = type(prompt) == "table" and prompt or body.prompt
        local texts = {}
        for i = 1, math.min(#ids, limit) do
            texts[i] = tostring(ids[i])
        end
        add(table.concat(texts, ","))
    end
    local turns = type(body.messages) == "table" and body.messages or body.input
    if type(turns) == "string" then
        add(turns)
    elseif type(turns) == "table" then
        for _, turn in ipairs(turns) do
            if chars >= limit then
                break
            end
            if type(turn) == "table" then
                add((type(turn.role) == "string" and turn.role or "") .. "\n" .. content_text(turn.content) .. "\n")
            elseif type(turn) == "string" then
                add(turn .. "\n")
            end
            -- Up to the first user turn: later turns grow with the conversation, and a key that took them in
            -- would move a conversation to another instance at each turn.
            if type(turn) ~= "table" or turn.role == "user" then
                break
            end
        end
    end
    if #pieces == 0 then
        return nil
    end
    local text = table.concat(pieces)
    local cut = utf8.offset(text, limit + 1)
    return cut and text:sub(1, cut - 1) or text
end

-- Above any budget (TOKEN_BUDGET_MAX, vllm_deploy/gateway.py), so a cost is always a Lua integer.
local COST_CEILING = 2 ^ 31

-- The output tokens a body may ask for (see txn.token_cost above), nil when it bounds none; only called once
-- over_cap passed, so every one of the five fields is a number or nil. A negative or fractional value is the
-- engine's to refuse; here it only must not lower the count.
local function largest(body, names)
    local found
    for _, name in ipairs(names) do
        local number = as_number(body[name])
        if number and (not found or number > found) then
            found = number
        end
    end
    return found
end

local function token_cost(body)
    local bound = largest(body, TOKENS)
    if not bound then
        return nil
    end
    local sequences = math.max(largest(body, FAN_OUT) or 1, 1)
    local cost = math.min(math.max(bound, 0) * sequences, COST_CEILING)
    return math.tointeger(math.ceil(cost))
end

local function read_body(txn, max_tokens, max_n, prefix_chars)
    local raw = txn.f:req_body() or ""
    -- What cjson takes and Python's json refuses: a NUL (cjson stops there as at the end of the
    -- text), bytes that are not UTF-8 (cjson does not look), a raw control character in a string.
    if raw:find("\0", 1, true) or not utf8.len(raw) then
        return txn:set_var("txn.refusal", "invalid_json")
    end
    local ok, body = pcall(cjson.decode, raw)
    -- Most bodies have no control byte at all: no string to walk.
    if not ok or (raw:find("[\1-\31]") and control_in_string(raw)) then
        return txn:set_var("txn.refusal", "invalid_json")
    end
    -- cjson decodes an array to a table too: only an object starts with '{'.
    if type(body) ~= "table" or not raw:match("^[ \t\r\n]*{") then
        return txn:set_var("txn.refusal", "not_object")
    end
    if type(body.model) == "string" then
        -- HAProxy's map lookup stops at a NUL ("tiny-a\u0000" would route as tiny-a): no served name
        -- has a backslash, so the spelled-out NUL finds no backend.
        txn:set_var("txn.model", (body.model:gsub("%z", "\\0")))
    end
    if type(body.user) == "string" and body.user ~= "" then
        txn:set_var("txn.route_session", body.user)
    end
    local limit = tonumber(prefix_chars) or 0
    if limit > 0 then
        local prefix = leading_text(body, limit)
        if prefix then
            txn:set_var("txn.route_prefix", prefix)
        end
    end
    local refusal = over_cap(body, TOKENS, tonumber(max_tokens) or 0, "max_tokens_too_large")
        or over_cap(body, FAN_OUT, tonumber(max_n) or 0, "n_too_large")
    if refusal then
        return txn:set_var("txn.refusal", refusal)
    end
    local cost = token_cost(body)
    if cost then
        txn:set_var("txn.token_cost", cost)
    end
end

-- A key's token budget: HAProxy 2.6 has no action that adds N to a counter (sc-add-gpc came later), but its
-- sc_inc_gpc fetch adds one, atomically, to a stick-table rate. So each bit k of a request's cost adds one
-- to the key's gpc_rate(k, window) (haproxy.cfg.j2, table `keys`), and what the key asked for over the
-- window is the sum of rate(k) * 2^k. Reads and increments are Lua calls to those fetches on the key's
-- tracked counter (sc0): one action, run only for keys that have a budget.
-- Sets txn.token_refusal (too_large: the request alone is above the budget; over_budget: with what the key
-- asked for in the window it would be), txn.token_window_limit (the budget per window), txn.token_used and
-- txn.token_retry_after; a request within budget is counted.
-- Arguments: the number of counters (bits), the window in seconds (the budget is per minute, scaled to it).
local function token_budget(txn, bits, window)
    window = tonumber(window)
    local limit = (tonumber(txn:get_var("txn.token_limit")) or 0) * window // 60
    local cost = tonumber(txn:get_var("txn.token_cost")) or 0
    txn:set_var("txn.token_window_limit", math.tointeger(limit))
    if cost > limit then
        return txn:set_var("txn.token_refusal", "too_large")
    end
    bits = tonumber(bits)
    local used = 0
    for k = 0, bits - 1 do
        used = used + (tonumber(txn.f:sc_gpc_rate(k, 0)) or 0) * (1 << k)
    end
    txn:set_var("txn.token_used", used)
    if used + cost > limit then
        -- What was asked for leaves the rate over the next window: the time until enough has left, as an
        -- estimate (at least 1 s; at most the window, since cost <= limit).
        local wait = math.ceil(window * (used + cost - limit) / used)
        txn:set_var("txn.token_retry_after", math.tointeger(math.min(math.max(wait, 1), window)))
        return txn:set_var("txn.token_refusal", "over_budget")
    end
    for k = 0, bits - 1 do
        if cost & (1 << k) ~= 0 then
            txn.f:sc_inc_gpc(k, 0)
        end
    end
end

core.register_action("vllm_gateway_body", { "http-req" }, read_body, 3)
core.register_action("vllm_gateway_token_budget", { "http-req" }, token_budget, 2)
