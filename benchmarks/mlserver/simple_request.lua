-- wrk: POST the `simple` request (two INT32 [1,16] inputs, JSON) to /v2/models/simple/infer.
wrk.method = "POST"
wrk.path = "/v2/models/simple/infer"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},' ..
           '{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}'
