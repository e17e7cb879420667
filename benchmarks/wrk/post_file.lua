-- wrk: POST the bytes of file $BODY to $TARGET. $HEADER_LENGTH, when set, is sent as
-- Inference-Header-Content-Length (a binary-data request's JSON part); $CONTENT_TYPE defaults to
-- application/json.
local file = assert(io.open(os.getenv("BODY"), "rb"))
wrk.body = file:read("*a")
file:close()
wrk.method = "POST"
wrk.path = os.getenv("TARGET")
wrk.headers["Content-Type"] = os.getenv("CONTENT_TYPE") or "application/json"
local header_length = os.getenv("HEADER_LENGTH")
if header_length ~= nil and header_length ~= "" then
  wrk.headers["Inference-Header-Content-Length"] = header_length
end
