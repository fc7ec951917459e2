package dev.wirelint.junit5;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Runs the annotated test class's MongoDB traffic through wirelint: the same
 * as {@code @ExtendWith(WirelintExtension.class)}.
 *
 * <pre>{@code
 * @WirelintTest
 * @SpringBootTest
 * class BlogTest { ... }
 * }</pre>
 */
@Target({ElementType.TYPE, ElementType.ANNOTATION_TYPE})
@Retention(RetentionPolicy.RUNTIME)
@Documented
@Inherited
@ExtendWith(WirelintExtension.class)
public @interface WirelintTest {}
