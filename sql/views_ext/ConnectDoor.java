package io.jetlake.sql;

import java.lang.reflect.Method;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkJobInfo;
import org.apache.spark.SparkStageInfo;
import org.apache.spark.SparkStatusTracker;
import org.apache.spark.connect.proto.AddArtifactsRequest;
import org.apache.spark.connect.proto.ExecutePlanRequest;
import org.apache.spark.connect.proto.ExecutePlanResponse;
import org.apache.spark.connect.proto.ReattachExecuteRequest;
import org.apache.spark.connect.proto.ReleaseSessionRequest;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connect.service.ExecuteJobTag$;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.connect.service.SparkConnectService;
import org.sparkproject.connect.grpc.ForwardingServerCall;
import org.sparkproject.connect.grpc.ForwardingServerCallListener;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.google_protos.rpc.ErrorInfo;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.protobuf.Any;

/**
 * Spark Connect's door: who the client is, which account its session reads, and how many rows
 * one result may have ({@code spark.connect.grpc.interceptor.classes}).
 *
 * <p>With logins on ({@link NatsLogins#on}), every call carries a bearer token ({@code
 * sc://host:port/;token=...}) that is a NATS login, checked by logging in to the NATS server;
 * none, or one the server refuses, ends the call UNAUTHENTICATED. The client's session is bound
 * to the login's account before Spark sees the request (the system account's to all), so the
 * plan check ({@link AccountWalls}) walls every query of it; a session another account's login
 * opened is refused to this one (PERMISSION_DENIED), as are uploads of code (artifacts) to a
 * walled session. Whatever the logins, a result past the service's max rows ends its call
 * RESOURCE_EXHAUSTED, and its Spark jobs are interrupted; so are those of a call whose client
 * went (its connection closed: the process killed, Ctrl-C), which Spark Connect would keep
 * running for minutes, waiting for the client to reattach.
 */
public final class ConnectDoor implements ServerInterceptor {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("Authorization", Metadata.ASCII_STRING_MARSHALLER);
  private static final String BEARER = "Bearer ";
  private static final Metadata.Key<byte[]> DETAILS =
      Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);
  private static final String ENRICHED = "spark.sql.connect.enrichError.enabled";
  private static final String WITHHELD =
      "the query failed; its details are withheld with " + ENRICHED + " off";
  private static volatile long maxRows = Long.MAX_VALUE;
  private static final long STOP_WAIT_MS = 60_000;

  /** Rows one result may have (the service's max_rows). */
  public static void limit(long rows) {
    maxRows = rows;
  }

  /** Rows one result may have, at every door that counts them ({@link JdbcOperations}). */
  static long maxRows() {
    return maxRows;
  }

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    NatsLogins.Login login = null;
    if (NatsLogins.on()) {
      String header = headers.get(AUTHORIZATION);
      if (header == null || !header.startsWith(BEARER)) {
        String hint = " (sc://host:port/;token=user:password)";
        return refuse(call, Status.UNAUTHENTICATED, NatsLogins.NO_LOGIN + hint);
      }
      login = NatsLogins.check(NatsLogins.fromToken(header.substring(BEARER.length())));
      if (login.refused() != null) {
        return refuse(call, Status.UNAUTHENTICATED, login.refused());
      }
    }
    Counted<Q, R> counted = new Counted<>(call);
    return new Claim<>(next.startCall(counted, headers), counted, login);
  }

  /**
   * Ends the call with {@code status} once the client has sent its request. Closed before the
   * request is read, the call's stream is reset under the client, which then sees UNAVAILABLE
   * rather than the status, and retries it with backoff for minutes (pyspark's default policy):
   * a refused login must fail at once, with its reason.
   */
  private static <Q> ServerCall.Listener<Q> refuse(
      ServerCall<Q, ?> call, Status status, String why) {
    call.request(Integer.MAX_VALUE); // read (and drop) whatever the client sends
    return new ServerCall.Listener<>() {
      @Override
      public void onHalfClose() {
        call.close(status.withDescription(why), new Metadata());
      }
    };
  }

  /** Binds the request's session to the login's account, or refuses the call. */
  private static final class Claim<Q, R>
      extends ForwardingServerCallListener.SimpleForwardingServerCallListener<Q> {
    private final Counted<Q, R> call;
    private final NatsLogins.Login login;
    private boolean closed;

    Claim(ServerCall.Listener<Q> delegate, Counted<Q, R> call, NatsLogins.Login login) {
      super(delegate);
      this.call = call;
      this.login = login;
    }

    @Override
    public void onMessage(Q request) {
      if (closed) {
        return;
      }
      String refused = claim(request);
      if (refused != null) {
        closed = true;
        call.close(Status.PERMISSION_DENIED.withDescription(refused), new Metadata());
        return;
      }
      super.onMessage(request);
    }

    @Override
    public void onHalfClose() {
      if (!closed) {
        super.onHalfClose();
      }
    }

    @Override
    public void onCancel() {
      SessionHolder h = call.holder;
      String operation = call.operation;
      if (h != null && operation != null) {
        stopGone(h, operation);
      }
      super.onCancel();
    }

    private String claim(Object request) {
      if (request instanceof ReleaseSessionRequest) { // ends a session, opens none
        return null;
      }
      if (request instanceof ExecutePlanRequest e && e.hasOperationId()) {
        call.operation = e.getOperationId();
      } else if (request instanceof ReattachExecuteRequest r) {
        call.operation = r.getOperationId();
      }
      String user = userId(request);
      String sessionId = (String) field(request, "getSessionId");
      if (user == null || sessionId == null || sessionId.isEmpty()) {
        return null; // Spark answers a request without a session with its own error
      }
      SessionHolder holder;
      try {
        holder =
            SparkConnectService.getOrCreateIsolatedSession(user, sessionId, scala.Option.empty());
      } catch (RuntimeException e) { // a closed session, a bad id: Spark says so itself
        return null;
      }
      call.holder = holder;
      if (login == null) {
        return null;
      }
      SparkSession session = holder.session();
      String owner = AccountWalls.claim(session, login.system() ? null : login.account());
      if (owner != null) {
        return "session " + sessionId + " is account " + owner + "'s, not "
            + login.account() + "'s";
      }
      if (!login.system()) { // its errors are kept by id, for the door to clean (Counted.close)
        session.conf().set(ENRICHED, "true");
      }
      if (!login.system() && request instanceof AddArtifactsRequest) {
        return "account " + login.account() + " may not add artifacts (code) to the service";
      }
      return null;
    }
  }

  /** Counts the rows a call sends; past max rows it ends the call and its operation. */
  private static final class Counted<Q, R>
      extends ForwardingServerCall.SimpleForwardingServerCall<Q, R> {
    volatile SessionHolder holder;
    volatile String operation; // the call's Spark Connect operation, once known
    private long rows;
    private boolean over;

    Counted(ServerCall<Q, R> delegate) {
      super(delegate);
    }

    @Override
    public synchronized void sendMessage(R message) {
      if (over) {
        return;
      }
      if (message instanceof ExecutePlanResponse r && operation == null) {
        operation = r.getOperationId(); // one the server named (the client named none)
      }
      if (message instanceof ExecutePlanResponse r && r.hasArrowBatch()) {
        rows += r.getArrowBatch().getRowCount();
        long limit = maxRows;
        if (rows > limit) {
          over = true;
          SessionHolder h = holder;
          if (h != null) {
            h.interruptOperation(r.getOperationId());
          }
          super.close(
              Status.RESOURCE_EXHAUSTED.withDescription(
                  "the result has more than " + limit + " rows, the service's max_rows"
                      + " (lake { sql { max_rows } }): aggregate, or add a LIMIT"),
              new Metadata());
          return;
        }
      }
      super.sendMessage(message);
    }

    @Override
    public synchronized void close(Status status, Metadata trailers) {
      if (over) {
        return;
      }
      SessionHolder h = holder;
      if (!status.isOk() && h != null && AccountWalls.account(h.session()) != null) {
        status = told(h, status, trailers);
      }
      super.close(status, trailers);
    }
  }

  /**
   * A walled session's failed call as {@link WalledErrors} would tell it: the status, its
   * error details (class, parameters; no server stack) and the error kept for the client's
   * FetchErrorDetails, all from the cleaned error. The trailers are rewritten in place.
   */
  private static Status told(SessionHolder holder, Status status, Metadata trailers) {
    byte[] raw = trailers.get(DETAILS);
    if (raw == null) {
      return status;
    }
    try {
      var rpc = org.sparkproject.connect.google_protos.rpc.Status.parseFrom(raw).toBuilder();
      for (int i = 0; i < rpc.getDetailsCount(); i++) {
        if (!rpc.getDetails(i).is(ErrorInfo.class)) {
          continue;
        }
        ErrorInfo.Builder info = rpc.getDetails(i).unpack(ErrorInfo.class).toBuilder();
        String id = info.getMetadataOrDefault("errorId", null);
        Throwable original = id == null ? null : holder.errorIdToError().getIfPresent(id);
        Throwable told =
            original == null
                ? new IllegalStateException(WITHHELD)
                : WalledErrors.clean(holder.session(), original);
        if (told == original) {
          return status;
        }
        info.removeMetadata("stackTrace").removeMetadata("messageParameters");
        if (told instanceof org.apache.spark.SparkThrowable spark) {
          info.putMetadata("errorClass", spark.getCondition());
          info.putMetadata(
              "messageParameters", JSON.writeValueAsString(spark.getMessageParameters()));
        } else {
          info.removeMetadata("errorClass");
        }
        if (id != null) {
          holder.errorIdToError().put(id, told);
        }
        String text = told.getMessage();
        rpc.setDetails(i, Any.pack(info.build())).setMessage(text);
        trailers.removeAll(DETAILS);
        trailers.put(DETAILS, rpc.build().toByteArray());
        return status.withDescription(text.length() > 2048 ? text.substring(0, 2048) : text);
      }
    } catch (java.io.IOException e) { // details Spark did not write: tell nothing of them
      trailers.removeAll(DETAILS);
      return status.withDescription(WITHHELD);
    }
    return status;
  }

  private static final com.fasterxml.jackson.databind.ObjectMapper JSON =
      new com.fasterxml.jackson.databind.ObjectMapper();

  /**
   * Interrupts the operation of a call whose client went, and says once none of its Spark
   * tasks runs any more (a job is marked cancelled at once; its tasks end when they next look).
   */
  private static void stopGone(SessionHolder holder, String operation) {
    if (holder.interruptOperation(operation).isEmpty()) {
      return; // it had ended
    }
    String tag = ExecuteJobTag$.MODULE$.apply(holder.userId(), holder.sessionId(), operation);
    SparkContext sc = holder.session().sparkContext();
    Thread watch =
        new Thread(
            () -> {
              long deadline = System.currentTimeMillis() + STOP_WAIT_MS;
              while (running(sc, tag) > 0 && System.currentTimeMillis() < deadline) {
                try {
                  Thread.sleep(100);
                } catch (InterruptedException e) {
                  return;
                }
              }
              // The service's log is its standard error, where Python's logging writes too.
              System.err.println(
                  running(sc, tag) > 0
                      ? "sql service: Connect operation " + operation + " still runs after its cancel"
                      : "sql service: Connect operation " + operation
                          + " stopped (its client went): no Spark task left");
            },
            "jetlake-connect-gone");
    watch.setDaemon(true);
    watch.start();
  }

  private static int running(SparkContext sc, String tag) {
    SparkStatusTracker tracker = sc.statusTracker();
    int tasks = 0;
    for (int job : tracker.getJobIdsForTag(tag)) {
      scala.Option<SparkJobInfo> info = tracker.getJobInfo(job);
      for (int stage : info.isDefined() ? info.get().stageIds() : new int[0]) {
        scala.Option<SparkStageInfo> found = tracker.getStageInfo(stage);
        tasks += found.isDefined() ? found.get().numActiveTasks() : 0;
      }
    }
    return tasks;
  }

  private static String userId(Object request) {
    Object context = field(request, "getUserContext");
    return context == null ? null : (String) field(context, "getUserId");
  }

  /** A getter every Connect request has under the same name (they share no interface). */
  private static Object field(Object message, String getter) {
    try {
      Method m = message.getClass().getMethod(getter);
      return m.invoke(message);
    } catch (ReflectiveOperationException e) {
      return null;
    }
  }
}
